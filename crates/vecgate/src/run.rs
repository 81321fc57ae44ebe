//! `run`, `ctl` and `pcap`: thin wrappers over the control crate.

use anyhow::{anyhow, Result};
use control::api::Request;
use control::config::Config;
use control::dataplane::{assemble, spawn, worker_core};
use control::server;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn run(
    config: Option<&Path>,
    duration: Option<f64>,
    interval: f64,
    socket: Option<PathBuf>,
    metrics: Option<String>,
    tunnel_counters: bool,
    json: bool,
) -> Result<()> {
    let mut cfg = match config {
        Some(p) => Config::load(p)?,
        None => Config::default_gateway(),
    };
    cfg.metrics.tunnel_counters |= tunnel_counters;
    crate::logging::init(cfg.log.level.as_deref(), "info", &cfg.source)?;
    // The socket first: a second instance on a running one's socket refuses to start
    // before it opens any interface (it would share them half-way).
    let sock = socket.unwrap_or_else(|| PathBuf::from(&cfg.dataplane.socket));
    let metrics_addr = match metrics.as_deref().or(cfg.metrics.listen.as_deref()) {
        Some(m) => Some(control::metrics::parse_listen(m).map_err(|e| match &metrics {
            Some(_) => anyhow!("--metrics {e}"),
            None => anyhow!("{}: metrics.listen: {e}", cfg.source),
        })?),
        None => None,
    };
    let bound = match server::bind(&sock) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(anyhow!(
                "control socket {}: another vecgate is running there; stop it or give this one `--socket PATH`",
                sock.display()
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::warn!(
                socket = %sock.display(),
                "cannot create the control socket: permission denied; running without `vecgate ctl`. \
            Run as root, or give --socket PATH in a folder you can write (e.g. --socket /tmp/vecgate.sock)"
            );
            None
        }
        Err(e) => {
            tracing::warn!(socket = %sock.display(), error = %e, "no control socket; running without `vecgate ctl`");
            None
        }
    };
    let a = match assemble(&cfg) {
        Ok(a) => a,
        Err(e) => {
            if let Some((_, b)) = &bound {
                b.remove_if_ours();
            }
            return Err(e.into());
        }
    };
    let mut control = a.control;
    control.config_path = config.map(Path::to_path_buf);
    let workers = a.workers;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let hangup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hangup.clone())?;
    let (jobs_tx, jobs) = crossbeam_channel::unbounded();
    if let Some(addr) = metrics_addr {
        match control::metrics::serve(addr, jobs_tx.clone()) {
            Ok(a) => tracing::info!("metrics on http://{a}/metrics"),
            Err(e) => {
                if let Some((_, b)) = &bound {
                    b.remove_if_ours();
                }
                return Err(anyhow!(e));
            }
        }
    }
    let bound = match bound {
        Some((l, b)) => {
            server::serve(l, jobs_tx.clone());
            tracing::info!(socket = %b.path().display(), "control socket");
            Some(b)
        }
        None => None,
    };
    let n_workers = workers.len();
    let handles: Vec<_> = workers.into_iter().enumerate().map(|(k, w)| spawn(&mut control, w, worker_core(&cfg, k), false)).collect();
    // systemd (Type=notify): ready once the workers run and the socket answers. Outside
    // systemd (no NOTIFY_SOCKET) this does nothing.
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
        tracing::warn!(error = %e, "could not tell the service manager we are ready");
    }
    tracing::info!(
        config = %cfg.source,
        interfaces = cfg.interfaces.len(),
        workers = n_workers,
        routes = control.state.route_count(),
        // GTP-U `ue` routes and service addresses, kept apart from `routes`.
        tunnel_routes = control.state.tunnel_route_count(),
        gtpu_tunnels = control.gtpu.len(),
        udp_tunnels = control.udptun.len(),
        aes_gcm = ipsec::crypto::aes_gcm_backend(),
        "dataplane started"
    );
    let start = Instant::now();
    let mut next_print = start + Duration::from_secs_f64(interval.max(0.05));
    let mut next_hold_look = start + HOLD_LOOK;
    let tty = std::io::stdout().is_terminal();
    // The previous live view's snapshot, for rates over the interval.
    let mut live_prev: Option<(Instant, engine::stats::Snapshot)> = None;
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
        if hangup.swap(false, Ordering::Relaxed) {
            // SIGHUP: as `vecgate ctl reload`; the outcome goes to the log.
            let r = control.handle(&Request::Reload { file: None });
            if !r.ok {
                tracing::error!(error = r.error.as_deref().unwrap_or(""), "reload on SIGHUP refused");
            }
        }
        control.process_events();
        control.pfcp_tick();
        if Instant::now() >= next_hold_look {
            // Held packets time out (3 s) even when nothing else reaches `ip-glean`, so
            // their buffers come back and `show neighbours` does not list stale ones.
            next_hold_look += HOLD_LOOK;
            control.look_at_held();
        }
        if interval > 0.0 && Instant::now() >= next_print {
            next_print += Duration::from_secs_f64(interval);
            if let Ok(s) = control.snapshot() {
                let now = Instant::now();
                let since = live_prev.as_ref().map_or(start, |(t, _)| *t);
                let r = crate::live::rates(live_prev.as_ref().map(|(_, p)| p), &s, now.duration_since(since).as_secs_f64());
                live_prev = Some((now, s));
                if json {
                    println!("{}", crate::live::json_line(&r));
                } else {
                    if tty {
                        print!("\x1b[2J\x1b[H");
                    }
                    let title = config.map_or("built-in default gateway".into(), |p| p.display().to_string());
                    print!("{}", crate::live::text(&r, &title));
                }
            }
        }
    }
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    let final_snapshot = control.snapshot();
    for w in &control.workers {
        let _ = w.send(engine::worker::WorkerCmd::Stop);
    }
    for h in handles {
        let _ = h.join();
    }
    if let Some(b) = &bound {
        b.remove_if_ours();
    }
    tracing::info!(seconds = format!("{:.1}", start.elapsed().as_secs_f64()), "dataplane stopped");
    // With --json, stdout stays one JSON object per line.
    if let (false, Ok(s)) = (json, final_snapshot) {
        println!("\nfinal:");
        print!("{}", control::format::runtime(&s));
        let errs: Vec<_> = s.counters.iter().filter(|c| c.count > 0).cloned().collect();
        print!("{}", control::format::errors(&errs));
    }
    Ok(())
}

/// How often the workers look at the packets they hold for unresolved next hops.
const HOLD_LOOK: Duration = Duration::from_millis(500);

/// `vecgate ctl`: exit 0 when the gateway did it, 1 when the request could not be made
/// (a bad command, no gateway to ask), 2 when the gateway refused it. Every error goes
/// to stderr as `vecgate: …`; `--json` (anywhere on the line) prints the reply as JSON.
pub fn ctl(socket: &Path, json: bool, words: &[String]) -> Result<()> {
    let json = json || words.iter().any(|w| w == "--json");
    let words: Vec<String> = words.iter().filter(|w| *w != "--json").cloned().collect();
    if words.first().map(String::as_str) == Some("help") {
        println!("{}", control::cli::HELP);
        return Ok(());
    }
    let mut req: Request = control::cli::parse(&words).map_err(|e| anyhow!(e))?;
    files_from_here(&mut req);
    let mut reply = server::call(socket, &req).map_err(|e| cannot_reach(socket, &e))?;
    if let (Request::IpRouteBatch { .. }, Some(error), [.., file]) = (&req, &mut reply.error, &words[..]) {
        if let Some(e) = control::fib::batch_error_in_file(file, error) {
            *error = e;
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&reply)?);
    } else if reply.ok {
        print!("{}", reply.text);
        if !reply.text.ends_with('\n') {
            println!();
        }
    }
    if !reply.ok {
        if !json {
            eprintln!("vecgate: {}", reply.error.as_deref().unwrap_or("the gateway refused the request"));
        }
        std::process::exit(2);
    }
    Ok(())
}

/// The gateway opens the files a command names in its own working directory (`/` under
/// systemd): a relative path is made this shell's, as `ip route batch` reads its file here.
fn files_from_here(req: &mut Request) {
    let file = match req {
        Request::Reload { file: Some(f) } | Request::PcapTrace { file: f, .. } | Request::PcapTraceDrop { file: f, .. } => f,
        _ => return,
    };
    if Path::new(file.as_str()).is_relative() {
        if let Ok(here) = std::env::current_dir() {
            *file = here.join(&*file).to_string_lossy().into_owned();
        }
    }
}

/// Why the control socket did not answer, in terms of what to do about it.
fn cannot_reach(socket: &Path, e: &std::io::Error) -> anyhow::Error {
    let s = socket.display();
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            anyhow!("no vecgate is running on {s} (no such socket): start one with `vecgate run`, or name its socket with --socket")
        }
        std::io::ErrorKind::ConnectionRefused => anyhow!(
            "{s} is stale: nothing answers on it (an instance ended without removing it); `vecgate run` replaces it, or name a live socket with --socket"
        ),
        std::io::ErrorKind::PermissionDenied => anyhow!("{s}: permission denied: the control socket is root-only (mode 0600); run as root"),
        _ => anyhow!("talking to {s}: {e}"),
    }
}

/// `vecgate check`: the file validated as start-up validates it, no device opened.
pub fn check(config: &Path) -> Result<()> {
    let cfg = Config::load(config)?;
    control::dataplane::check(&cfg)?;
    // What only `run` reads (the logging crate's filter is the binary's).
    if let Some(level) = cfg.log.level.as_deref() {
        crate::logging::level_filter(level, &cfg.source)?;
    }
    println!("{}: ok", config.display());
    Ok(())
}

pub fn pcap(config: &Path, json: bool, drops: Option<&Path>) -> Result<()> {
    let cfg = Config::load(config)?;
    let (mut control, mut worker) = assemble(&cfg)?.into_single();
    if let Some(path) = drops {
        let sink = io::pcap::DropCapture::create(path, u64::MAX)?;
        worker.graph.set_drop_capture(Some(Box::new(sink)), &engine::DropFilter::default())?;
    }
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
