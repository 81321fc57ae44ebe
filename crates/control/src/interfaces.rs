//! Interfaces added and removed while the gateway runs (`ctl create interface`, `ctl
//! delete interface`, `reload`).
//!
//! Adding: the interface is checked like a configured one (plus against the running
//! interfaces and routes), its devices are opened on every worker (an af_packet socket
//! each, in the interface's fanout group; a TAP device on worker 0 with the others
//! sending through their lanes), the tables that know it are published, and only then
//! do the workers start polling it — so its first packet finds its addresses.
//! Removing: the workers stop using it first, then the tables forget it, with the static
//! routes through it and its neighbours (reported, as a kernel does). The backends that
//! open at run time are af_packet, tap and null; packet generators, pcap files and
//! af_xdp (an XDP program and queue plan for all workers) are set at start-up.

use crate::api::Reply;
use crate::config::{Config, InterfaceConfig, InterfaceKind};
use crate::dataplane::{interface_spec, kind_name, open_device, Control, InterfaceInfo};
use engine::worker::WorkerCmd;
use engine::IfIndex;
use ip::state::RemovedInterface;
use ip::urpf::Urpf;
use std::collections::BTreeMap;
use std::time::Duration;

/// The backends an interface can be added with at run time.
pub const RUNTIME_KINDS: [InterfaceKind; 3] = [InterfaceKind::AfPacket, InterfaceKind::Tap, InterfaceKind::Null];

/// How long a worker may take to answer (it answers between vectors).
pub(crate) const WORKER_REPLY: Duration = Duration::from_secs(5);

/// `create interface`: add it and say where it runs.
pub fn create(c: &mut Control, ic: InterfaceConfig) -> Result<Reply, String> {
    // The checks and device opening of a configured interface, on a file that holds
    // just this one (named after the request in errors).
    let mut scratch = c.applied.clone();
    scratch.source = format!("create interface {}", ic.name);
    scratch.text = String::new();
    scratch.interfaces = vec![ic.clone()];
    let i = add(c, &scratch, 0)?;
    let kind = kind_name(ic.kind);
    let on = ic.host_if.as_deref().map(|h| format!(" on {h}")).unwrap_or_default();
    Ok(Reply::ok(
        serde_json::json!({ "name": ic.name, "index": i.0, "kind": kind }),
        format!("created interface {} ({kind}{on}) index {}", ic.name, i.0),
    ))
}

/// `delete interface`: remove it and list what went with it.
pub fn delete(c: &mut Control, name: &str) -> Result<Reply, String> {
    endpoints_elsewhere(c, name)?;
    let gone = remove(c, name)?;
    let routes: Vec<String> = gone.routes.iter().map(|(p, t)| crate::reload::describe(p, t)).collect();
    let neighbours: Vec<String> = gone.neighbours.iter().map(|a| a.to_string()).collect();
    let mut text = format!("deleted interface {name} (index {})", gone.if_index.0);
    if routes.is_empty() {
        text += "; no route went with it";
    } else {
        text += &format!("; {} route{} went with it: {}", routes.len(), if routes.len() == 1 { "" } else { "s" }, routes.join(", "));
    }
    let narrowed: Vec<String> = gone.narrowed.iter().map(|p| p.to_string()).collect();
    if !narrowed.is_empty() {
        text += &format!("; multipath routes that lost their paths through it: {}", narrowed.join(", "));
    }
    if !neighbours.is_empty() {
        text += &format!("; neighbours forgotten: {}", neighbours.join(", "));
    }
    Ok(Reply::ok(
        serde_json::json!({ "name": name, "index": gone.if_index.0, "routes": routes, "narrowed": narrowed, "neighbours": neighbours }),
        text,
    ))
}

/// `delete interface` refuses an interface whose addresses tunnels, SAs or the load
/// balancer send from: they would go on sending from an address the gateway no longer
/// has (`create` refuses the same state). A reload checks its file whole instead.
fn endpoints_elsewhere(c: &Control, name: &str) -> Result<(), String> {
    use ip::tables::{TunnelKind, TunnelRef};
    let i = c.state.if_index(name).map_err(|e| e.to_string())?;
    let Some(ifc) = c.state.interfaces().get(i.get()) else { return Ok(()) };
    let ours: Vec<std::net::IpAddr> = ifc.ip4.iter().map(|(a, _)| (*a).into()).chain(ifc.ip6.iter().map(|(a, _)| (*a).into())).collect();
    let mut users: Vec<String> = Vec::new();
    let mut note = |what: String, a: std::net::IpAddr| {
        if ours.contains(&a) {
            users.push(format!("{what} (local {a})"));
        }
    };
    for (id, t) in c.gtpu.tunnels() {
        note(TunnelRef { kind: TunnelKind::Gtpu4, id }.if_name(), t.local());
    }
    for (id, t) in c.udptun.tunnels() {
        note(TunnelRef { kind: TunnelKind::Gue4, id }.if_name(), t.local);
    }
    for (index, sa) in c.ipsec.iter() {
        note(format!("SA {index}"), sa.spec.local);
    }
    for (_, s) in c.lb.state.services().filter(|(_, s)| s.kind != lb::ServiceType::NodePort) {
        note(format!("service {:?}", s.name), s.vip);
    }
    // The UPF's N3 addresses: the F-TEIDs it gave the SMFs name them.
    if let Some(u) = c.applied.pfcp.as_ref().and_then(|p| p.upf_config(0).ok()) {
        for (key, a) in [("[pfcp] n3", u.n3_ipv4.map(Into::into)), ("[pfcp] n3_ipv6", u.n3_ipv6.map(Into::into))] {
            if let Some(a) = a {
                note(key.to_string(), a);
            }
        }
    }
    for (key, a) in [("[lb] snat4", c.applied.lb.snat4), ("[lb] snat6", c.applied.lb.snat6)] {
        if let Some(a) = a {
            note(key.to_string(), a);
        }
    }
    if users.is_empty() {
        return Ok(());
    }
    Err(format!("{name} holds the local address of {}: delete or move them first", users.join(", ")))
}

/// Add `cfg.interfaces[i]` to the running gateway; errors start with `cfg.source` (the
/// request or the file) and name the field.
pub(crate) fn add(c: &mut Control, cfg: &Config, i: usize) -> Result<IfIndex, String> {
    let ic = &cfg.interfaces[i];
    let field = format!("{}: interface[{i}]", cfg.source);
    if !RUNTIME_KINDS.contains(&ic.kind) {
        return Err(format!(
            "{field}.type: {} interfaces are opened at start-up only (restart to add one); at run time: af_packet, tap or null",
            kind_name(ic.kind)
        ));
    }
    if ic.parcels {
        return Err(format!("{field}.parcels: a link that takes parcels is set at start-up only (restart to add one)"));
    }
    if c.workers.is_empty() {
        return Err(format!("{field}: this dataplane has no running workers to poll an interface"));
    }
    if let Some(o) = ic.host_if.as_ref().and_then(|h| c.interfaces.iter().find(|o| o.host_if.as_ref() == Some(h))) {
        return Err(format!(
            "{field}.host_if: {:?} is already {}'s host interface: expected each host interface once",
            o.host_if.as_deref().unwrap_or_default(),
            o.name
        ));
    }
    let spec = interface_spec(cfg, i).map_err(|e| e.to_string())?;
    let at = c.state.add_interface(spec).map_err(|e| format!("{field}: {e}"))?;
    if ic.urpf != Urpf::Off && at.get() >= 64 {
        let _ = c.state.remove_interface(&ic.name);
        return Err(format!("{field}.urpf: only the first 64 interfaces may check sources (this one would be interface {})", at.get()));
    }
    c.state.set_urpf(at, ic.urpf);
    let workers = c.workers.len();
    // A TAP device exists once: worker 0 owns it, the others send through their lanes.
    let owners = crate::dataplane::owners(ic.kind, workers);
    let mut devices = Vec::with_capacity(workers);
    let mut detail = None;
    for k in 0..workers {
        let to = c.lanes_to.get(k).map_or(&[][..], |v| v.as_slice());
        match open_device(cfg, i, at, k, owners, &mut BTreeMap::new(), None, to) {
            Ok((d, det)) => {
                detail = detail.or(det);
                devices.push(d);
            }
            Err(e) => {
                // Nothing was published: forget it again (the devices opened so far close
                // as they drop).
                let _ = c.state.remove_interface(&ic.name);
                return Err(e.to_string());
            }
        }
    }
    let info = InterfaceInfo { name: ic.name.clone(), kind: kind_name(ic.kind), detail, host_if: ic.host_if.clone() };
    match c.interfaces.get_mut(at.get()) {
        Some(slot) => *slot = info,
        None => {
            c.interfaces.resize(at.get(), InterfaceInfo { name: String::new(), kind: "removed", detail: None, host_if: None });
            c.interfaces.push(info);
        }
    }
    // Tables first: the port's first packet must find its interface's addresses.
    c.publish_routes();
    let input = (ic.kind != InterfaceKind::Null).then(|| format!("{}-input", kind_name(ic.kind)));
    let mut replies = Vec::with_capacity(workers);
    for (k, device) in devices.into_iter().enumerate() {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cmd = WorkerCmd::AddPort { if_index: at, name: ic.name.clone(), device, input: input.clone(), reply: tx };
        if c.workers[k].send(cmd).is_err() {
            replies.push(Err(format!("worker {k} has stopped")));
            continue;
        }
        replies.push(rx.recv_timeout(WORKER_REPLY).unwrap_or_else(|_| Err(format!("worker {k} did not answer"))));
    }
    if let Some(Err(e)) = replies.iter().find(|r| r.is_err()) {
        let e = e.clone();
        let _ = remove(c, &ic.name);
        return Err(format!("{field}: {e}"));
    }
    tracing::info!(interface = %ic.name, index = at.0, kind = kind_name(ic.kind), "interface added");
    Ok(at)
}

/// Remove the interface `name`: the workers drop its devices, then the tables forget it.
pub(crate) fn remove(c: &mut Control, name: &str) -> Result<RemovedInterface, String> {
    let i = c.state.if_index(name).map_err(|e| e.to_string())?;
    if let Some(spd) = c.spd.binding(i) {
        return Err(format!("{name} has SPD {} bound: unbind it first (`ipsec spd unbind {name}`)", spd.0));
    }
    if c.state.punt().is_some_and(|p| p.interface == name) {
        return Err(format!("{name} is the punt link: turn [punt] off first (a reload without it)"));
    }
    if let Some((id, _)) = c.gtpu.tunnels().find(|(_, t)| t.decap_next == gtpu::DecapNext::Ethernet(i)) {
        let t = ip::tables::TunnelRef { kind: ip::tables::TunnelKind::Gtpu4, id };
        return Err(format!("GTP-U tunnel {} decapsulates to {name}: delete it first", t.if_name()));
    }
    if c.applied.interfaces.iter().any(|ic| ic.name == name && ic.parcels) {
        return Err(format!("{name} takes parcels: a parcel link is removed by a restart only"));
    }
    for (k, w) in c.workers.iter().enumerate() {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if w.send(WorkerCmd::RemovePort { if_index: i, reply: tx }).is_err() {
            continue;
        }
        match rx.recv_timeout(WORKER_REPLY) {
            // A worker without that port (an interface whose add failed half-way) is fine.
            Ok(_) => {}
            Err(_) => return Err(format!("delete interface {name}: worker {k} did not answer; the interface is still there")),
        }
    }
    let gone = c.state.remove_interface(name).map_err(|e| e.to_string())?;
    if let Some(slot) = c.interfaces.get_mut(i.get()) {
        *slot = InterfaceInfo { name: String::new(), kind: "removed", detail: None, host_if: None };
    }
    c.publish_routes();
    tracing::info!(interface = %name, index = i.0, routes = gone.routes.len(), "interface removed");
    Ok(gone)
}

/// `create interface <name> <type> [host-if <if>] [mac <mac>] [mtu <n>] [address <a/len>]...
/// [vnet-hdr on|off]`.
pub fn parse_create(name: &str, kind: &str, w: &[&str]) -> Result<crate::api::Request, String> {
    let kind = match kind {
        "af_packet" | "af-packet" => InterfaceKind::AfPacket,
        "tap" => InterfaceKind::Tap,
        "null" => InterfaceKind::Null,
        k => return Err(format!("create interface: type {k:?}: expected af_packet, tap or null (the others are set at start-up)")),
    };
    let mut ic = InterfaceConfig {
        name: name.to_string(),
        kind,
        mac: None,
        mtu: crate::config::default_mtu(),
        parcels: false,
        urpf: Default::default(),
        addresses: Vec::new(),
        input: None,
        output: None,
        host_if: None,
        vnet_hdr: None,
        rx_retire_ms: None,
        rx_ring: None,
        rx_frame_size: None,
        rx_frames: None,
        xdp_mode: None,
        zero_copy: None,
        xdp_frames: None,
        xdp_frame_size: None,
    };
    for pair in w.chunks(2) {
        match pair {
            ["host-if", v] => ic.host_if = Some(v.to_string()),
            ["mac", v] => ic.mac = Some(v.to_string()),
            ["mtu", v] => ic.mtu = v.parse().map_err(|_| format!("mtu {v:?}: expected 68 to {}", crate::dataplane::MAX_MTU))?,
            ["address", v] => ic.addresses.push(v.to_string()),
            ["vnet-hdr", "on"] => ic.vnet_hdr = Some(true),
            ["vnet-hdr", "off"] => ic.vnet_hdr = Some(false),
            ["vnet-hdr", v] => return Err(format!("vnet-hdr {v:?}: expected on or off")),
            [k, _] => return Err(format!("create interface: unknown word {k:?} (host-if, mac, mtu, address, vnet-hdr)")),
            [k] => return Err(format!("create interface: {k:?} needs a value")),
            _ => unreachable!("chunks of two"),
        }
    }
    Ok(crate::api::Request::CreateInterface(ic))
}
