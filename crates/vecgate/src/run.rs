//! `run`, `ctl` and `pcap`: thin wrappers over the control crate.

use anyhow::{anyhow, Context, Result};
use control::api::Request;
use control::config::Config;
use control::dataplane::{assemble, spawn, worker_core};
use control::server;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn run(config: Option<&Path>, duration: Option<f64>, interval: f64, socket: Option<PathBuf>) -> Result<()> {
    let cfg = match config {
        Some(p) => Config::load(p)?,
        None => Config::default_gateway(),
    };
    let a = assemble(&cfg)?;
    let mut control = a.control;
    let workers = a.workers;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let sock = socket.unwrap_or_else(|| PathBuf::from(&cfg.dataplane.socket));
    let (jobs_tx, jobs) = crossbeam_channel::unbounded();
    match server::bind(&sock) {
        Ok(l) => {
            server::serve(l, jobs_tx);
            eprintln!("vecgate: control socket {}", sock.display());
        }
        Err(e) => eprintln!("vecgate: no control socket ({}: {e}); running without `vecgate ctl`", sock.display()),
    }
    let handles: Vec<_> = workers.into_iter().enumerate().map(|(k, w)| spawn(&mut control, w, worker_core(&cfg, k), false)).collect();
    let start = Instant::now();
    let mut next_print = start + Duration::from_secs_f64(interval.max(0.05));
    let tty = std::io::stdout().is_terminal();
    let pfcp = control.pfcp.as_ref().map_or_else(crossbeam_channel::never, |p| p.rx.clone());
    if let Some(a) = control.pfcp.as_ref().and_then(|p| p.local_addr()) {
        eprintln!("vecgate: PFCP on {a}");
    }
    loop {
        if stop.load(Ordering::Relaxed) || duration.is_some_and(|d| start.elapsed().as_secs_f64() >= d) {
            break;
        }
        if handles.iter().any(|h| h.is_finished()) {
            break;
        }
        crossbeam_channel::select! {
            recv(jobs) -> job => if let Ok((req, reply)) = job { let _ = reply.send(control.handle(&req)); },
            recv(pfcp) -> d => if let Ok(d) = d { control.pfcp_datagram(d); },
            recv(crossbeam_channel::after(Duration::from_millis(50))) -> _ => {},
        }
        control.process_events();
        control.pfcp_tick();
        if interval > 0.0 && Instant::now() >= next_print {
            next_print += Duration::from_secs_f64(interval);
            if let Ok(s) = control.snapshot() {
                if tty {
                    print!("\x1b[2J\x1b[H");
                }
                println!(
                    "vecgate {} — {} (ctrl-c to stop)\n",
                    env!("CARGO_PKG_VERSION"),
                    config.map_or("built-in default gateway".into(), |p| p.display().to_string())
                );
                print!("{}", control::format::runtime(&s));
                let errs: Vec<_> = s.counters.iter().filter(|c| c.count > 0).cloned().collect();
                println!();
                print!("{}", control::format::errors(&errs));
            }
        }
    }
    let final_snapshot = control.snapshot();
    for w in &control.workers {
        let _ = w.send(engine::worker::WorkerCmd::Stop);
    }
    for h in handles {
        let _ = h.join();
    }
    if sock.exists() {
        let _ = std::fs::remove_file(&sock);
    }
    if let Ok(s) = final_snapshot {
        println!("\nfinal:");
        print!("{}", control::format::runtime(&s));
        let errs: Vec<_> = s.counters.iter().filter(|c| c.count > 0).cloned().collect();
        print!("{}", control::format::errors(&errs));
    }
    Ok(())
}

pub fn ctl(socket: &Path, json: bool, words: &[String]) -> Result<()> {
    if words.first().map(String::as_str) == Some("help") {
        println!("{}", control::cli::HELP);
        return Ok(());
    }
    let req: Request = control::cli::parse(words).map_err(|e| anyhow!(e))?;
    let reply = server::call(socket, &req).with_context(|| format!("talking to {}", socket.display()))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&reply)?);
    } else {
        print!("{}", reply.text);
        if !reply.text.ends_with('\n') {
            println!();
        }
    }
    if !reply.ok {
        std::process::exit(2);
    }
    Ok(())
}

pub fn pcap(config: &Path, json: bool) -> Result<()> {
    let cfg = Config::load(config)?;
    let (mut control, worker) = assemble(&cfg)?.into_single();
    let handle = spawn(&mut control, worker, None, true);
    while !handle.is_finished() {
        control.process_events();
        std::thread::sleep(Duration::from_millis(5));
    }
    let worker = handle.join().map_err(|_| anyhow!("worker thread panicked"))?;
    let s = worker.snapshot();
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", control::format::runtime(&s));
        let errs: Vec<_> = s.counters.iter().filter(|c| c.count > 0).cloned().collect();
        print!("{}", control::format::errors(&errs));
        for p in &s.ports {
            println!("{}: rx {} tx {} tx-errors {}", p.name, p.counters.rx_packets, p.counters.tx_packets, p.counters.tx_errors);
        }
    }
    Ok(())
}
