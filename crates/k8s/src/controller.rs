//! The I/O shell around [`Model`]: kube-runtime watchers on Services and EndpointSlices
//! (list then watch, bookmarks, a relist on `410 Gone`, reconnects with backoff), and
//! the running gateway's JSON socket, through which every change is one typed request.
//!
//! Nothing is applied until both kinds (and this node's Node, whose zone the topology
//! hints are read against) are listed once: the first sync then adds each LB
//! service whole (one request per service, its backends included). After that an event
//! applies only what its Service's diff says; a relist applies only what changed meanwhile.
//! The gateway is checked every [`GATEWAY_CHECK`] by its instance (`show instance`: pid and
//! start time, a few bytes): one restarted under the controller (it holds only its config
//! file's LB services again) or unreachable for a while is read back and every Service's
//! difference applied once it answers. The same process is compared with what was applied
//! by its LB services' digests (`show lb digests`, ~55 bytes a service: a hash of each
//! one's spec and backends): a managed LB service deleted or changed by hand in any way
//! (`lb service del`, `lb backend add|del|set`: a weight, a port, its conditions) is read
//! back alone and its Service's difference applied (`restored`).

use crate::desired::{is_managed, Settings};
use crate::health::HealthServer;
use crate::model::{Change, Listed, Model};
use crate::objects::{Key, Service, Slice};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node as K8sNode, Service as K8sService};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often the gateway is asked which process it is: a gateway restarted under the
/// controller starts from its config file again, and no Kubernetes event says so.
pub const GATEWAY_CHECK: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct Options {
    /// The gateway's control socket.
    pub socket: PathBuf,
    /// Kubeconfig file; without it, the in-cluster service account (or `KUBECONFIG`).
    pub kubeconfig: Option<PathBuf>,
    pub settings: Settings,
    /// Where the health checks are answered (the Services' `healthCheckNodePort`s and the
    /// proxy's `/healthz`).
    pub health: crate::health::HealthOptions,
    /// Serve the Services and slices labelled `service.kubernetes.io/service-proxy-name`
    /// with this value only; `None`: those without the label, as kube-proxy
    /// ([`crate::objects::selector`]).
    pub proxy_name: Option<crate::objects::ProxyName>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubeconfig {0}: {1}")]
    Kubeconfig(String, String),
    #[error("kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("socket {0}: {1}")]
    Socket(String, std::io::Error),
    #[error("socket {0}: {1}: {2}")]
    Refused(String, &'static str, String),
    #[error("{0}")]
    Settings(String),
}

/// Counts since start, logged as they change.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub events: u64,
    pub requests: u64,
    pub refused: u64,
    pub bad_objects: u64,
    /// Managed LB services found changed outside the controller (deleted or altered by
    /// hand) and restored from their Services.
    pub restored: u64,
}

struct Applier {
    socket: PathBuf,
    stats: Stats,
    /// Services with a change the gateway refused: tried again after a change to another
    /// Service is applied, which may have freed what was refused (an address, a port).
    pending: BTreeSet<Key>,
    /// The gateway process whose LB services were read back (`show instance`'s
    /// `instance`); another one answering has restarted.
    instance: Option<serde_json::Value>,
    /// The gateway refused `show lb digests` (logged once).
    digests_refused: bool,
}

impl Applier {
    fn call(&self, req: &control::api::Request, what: &'static str) -> Result<control::api::Reply, Error> {
        let sock = self.socket.display().to_string();
        let reply = control::server::call(&self.socket, req).map_err(|e| Error::Socket(sock.clone(), e))?;
        if !reply.ok {
            return Err(Error::Refused(sock, what, reply.error.unwrap_or_default()));
        }
        Ok(reply)
    }

    /// Plan and apply one Service's changes; the number applied. A refusal is logged at
    /// warn, or at debug when `retry` (it was logged when first refused).
    fn apply(&mut self, model: &mut Model, key: &Key, retry: bool) -> Result<usize, Error> {
        let mut n = 0;
        let mut refused = false;
        for c in model.plan(key) {
            let reply =
                control::server::call(&self.socket, &c.request()).map_err(|e| Error::Socket(self.socket.display().to_string(), e))?;
            self.stats.requests += 1;
            if reply.ok {
                model.record(&c);
                n += 1;
            } else {
                self.stats.refused += 1;
                refused = true;
                let error = reply.error.as_deref().unwrap_or("");
                if retry {
                    tracing::debug!(service = %key, change = ?short(&c), error, "change refused again");
                } else {
                    tracing::warn!(service = %key, change = ?short(&c), error, "change refused");
                }
            }
        }
        if refused {
            self.pending.insert(key.clone());
        } else {
            self.pending.remove(key);
        }
        Ok(n)
    }

    /// Apply the Services `keys`, then, if that changed anything, the pending ones.
    fn apply_all(&mut self, model: &mut Model, keys: impl IntoIterator<Item = Key>) -> Result<usize, Error> {
        let mut n = 0;
        let mut tried = BTreeSet::new();
        for k in keys {
            n += self.apply(model, &k, false)?;
            tried.insert(k);
        }
        if n > 0 {
            let pending: Vec<Key> = self.pending.difference(&tried).cloned().collect();
            for k in pending {
                n += self.apply(model, &k, true)?;
            }
        }
        Ok(n)
    }

    /// The gateway process answering (`show instance`: a reply of a few bytes, where
    /// reading its LB services back is megabytes at 10 000 services).
    fn instance(&self) -> Result<serde_json::Value, Error> {
        Ok(self.call(&control::api::Request::ShowInstance {}, "show instance")?.data["instance"].clone())
    }

    /// Whether the gateway is still the process whose LB services were read back (so it
    /// holds what was applied since).
    fn same_instance(&self) -> Result<bool, Error> {
        let now = self.instance()?;
        Ok(self.instance.as_ref() == Some(&now))
    }

    /// The digests of the managed LB services the gateway holds (`show lb digests`).
    fn held(&self) -> Result<BTreeMap<String, String>, Error> {
        let digests = self.call(&control::api::Request::ShowLbDigests {}, "show lb digests")?.data;
        Ok(managed_digests(&digests))
    }

    /// Compare the gateway's managed LB services with what was applied, by digest
    /// ([`Model::drift`]); each that differs (deleted or changed by hand through the ctl:
    /// the service, or a backend added, removed, reweighted, moved to another port or
    /// drained) is read back alone, taken as applied, and its Service's difference
    /// applied, which restores it. Counted (`restored`) and logged; the number of changes.
    fn restore(&mut self, model: &mut Model) -> Result<usize, Error> {
        let held = match self.held() {
            Ok(h) => h,
            // A gateway of a release before `show lb digests`: it is not checked (a
            // restart is still seen), rather than taken as unreachable.
            Err(Error::Refused(_, _, e)) => {
                if !self.digests_refused {
                    tracing::warn!(error = e.as_str(), "the gateway gives no LB service digests: changes made by hand are not restored");
                }
                self.digests_refused = true;
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
        let drifted = model.drift(&held);
        if drifted.is_empty() {
            return Ok(0);
        }
        let mut keys = BTreeSet::new();
        let mut restored = 0;
        for name in &drifted {
            let now = if held.contains_key(name) { self.read_back(name)? } else { None };
            if now.is_some() && now.as_ref() == model.applied().get(name) {
                // Another digest, the same service (a gateway whose digest differs from
                // this build's): nothing to restore.
                tracing::debug!(service = name.as_str(), "LB service's digest differs, its read-back does not");
                continue;
            }
            tracing::warn!(
                service = name.as_str(),
                held = now.is_some(),
                "LB service not as the controller applied it (changed or deleted outside it); restoring it from its Service"
            );
            keys.extend(model.readopt(name, now));
            restored += 1;
        }
        self.stats.restored += restored;
        let n = self.apply_all(model, keys)?;
        if restored > 0 {
            tracing::info!(services = restored, changes = n, "LB services restored");
        }
        Ok(n)
    }

    /// One LB service with its backends, as the gateway holds it (its row and its backend
    /// rows); `None` if it has none by that name (deleted meanwhile) or its row is not
    /// understood (then replaced, as at start).
    fn read_back(&self, name: &str) -> Result<Option<lb::ServiceSpec>, Error> {
        use control::api::Request;
        let service = Some(name.to_string());
        // A refusal (no such service any more): none; an unreachable gateway: the error.
        let ask = |req: &Request, what| match self.call(req, what) {
            Ok(r) => Ok(Some(r.data)),
            Err(Error::Refused(..)) => Ok(None),
            Err(e) => Err(e),
        };
        let Some(rows) = ask(&Request::ShowLbServices { service: service.clone() }, "show lb services")? else { return Ok(None) };
        let Some(backends) = ask(&Request::ShowLbBackends { service }, "show lb backends")? else { return Ok(None) };
        let Some(row) = rows.as_array().and_then(|r| r.first()) else { return Ok(None) };
        let backends = backends.as_array().into_iter().flatten().map(backend_row).collect();
        Ok(spec_of_row(row, backends)
            .map(|mut spec| {
                spec.backends.sort_by_key(|b| (b.addr, b.port));
                spec
            })
            .map_err(|e| tracing::warn!(service = name, error = %e, "LB service not understood; it will be replaced"))
            .ok())
    }

    /// Read the gateway's LB services back as applied, then apply every Service's
    /// difference; the number of changes.
    fn resync(&mut self, model: &mut Model) -> Result<usize, Error> {
        model.forget_applied();
        self.pending.clear();
        adopt_existing(self, model)?;
        let keys = model.keys();
        self.apply_all(model, keys)
    }
}

/// The periodic check: a gateway restarted (another process answers), or unreachable, is
/// resynced; one still the same process has its managed LB services compared with what
/// was applied, and those changed by hand restored ([`Applier::restore`]). `lost`: it
/// was unreachable; kept until a resync succeeds.
fn check_gateway(applier: &mut Applier, model: &mut Model, lost: &mut bool) {
    let t0 = Instant::now();
    let held = if *lost { Ok(false) } else { applier.same_instance() };
    match held.and_then(|held| if held { applier.restore(model).map(|_| None) } else { applier.resync(model).map(Some) }) {
        Ok(None) => {
            tracing::debug!(lb_services = model.applied().len(), us = t0.elapsed().as_micros() as u64, "gateway checked");
        }
        Ok(Some(n)) => {
            *lost = false;
            tracing::info!(
                lb_services = model.applied().len(),
                changes = n,
                ms = t0.elapsed().as_secs_f64() * 1e3,
                "gateway resynced (it had restarted, or did not answer)"
            );
        }
        Err(e) => gateway_lost(lost, &e),
    }
}

fn gateway_lost(lost: &mut bool, e: &Error) {
    if !*lost {
        tracing::warn!(error = %e, "gateway unreachable; its LB services are read back and every Service resynced once it answers");
    }
    *lost = true;
}

fn short(c: &Change) -> String {
    match c {
        Change::DelService(n) => format!("del service {n}"),
        Change::AddService(s) => format!("add service {} ({} backends)", s.name, s.backends.len()),
        Change::SetBackend { service, backend } => format!("set backend {}:{} of {service}", backend.addr, backend.port),
        Change::DelBackend { service, addr, port } => format!("del backend {addr}:{port} of {service}"),
    }
}

/// The managed LB services the gateway holds now, as [`Model::adopt`] takes them; the
/// gateway's instance is noted first (a restart from then on is seen at the next check).
fn adopt_existing(applier: &mut Applier, model: &mut Model) -> Result<usize, Error> {
    use control::api::Request;
    applier.instance = Some(applier.instance()?);
    let services = applier.call(&Request::ShowLbServices { service: None }, "show lb services")?.data;
    let backends = applier.call(&Request::ShowLbBackends { service: None }, "show lb backends")?.data;
    // Backend rows by service, in one pass (100 000 rows at the scale measured).
    let mut by_service: std::collections::HashMap<&str, Vec<serde_json::Value>> = std::collections::HashMap::new();
    for b in backends.as_array().into_iter().flatten() {
        by_service.entry(b["service"].as_str().unwrap_or("")).or_default().push(backend_row(b));
    }
    let mut n = 0;
    for row in services.as_array().into_iter().flatten() {
        let Some(name) = row["name"].as_str().filter(|n| is_managed(n)) else { continue };
        match spec_of_row(row, by_service.remove(name).unwrap_or_default()) {
            Ok(mut spec) => {
                spec.backends.sort_by_key(|b| (b.addr, b.port));
                model.adopt(spec);
                n += 1;
            }
            Err(e) => tracing::warn!(service = name, error = %e, "existing LB service not understood; it will be replaced"),
        }
    }
    Ok(n)
}

/// A `show lb backends` row as a backend spec reads it.
fn backend_row(b: &serde_json::Value) -> serde_json::Value {
    let mut spec = serde_json::json!({"addr": b["addr"], "port": b["port"], "weight": b["weight"], "conditions": b["conditions"], "local": b["local"]});
    // Present only when set, as in a spec.
    if let Some(z) = b.get("other_zone") {
        spec["other_zone"] = z.clone();
    }
    spec
}

/// A `show lb services` row and its backends' rows as the spec the service was added with.
fn spec_of_row(row: &serde_json::Value, backends: Vec<serde_json::Value>) -> Result<lb::ServiceSpec, serde_json::Error> {
    let mut row = row.clone();
    // The size the service was added with (not the size its table has now, which
    // follows the backends): a controller restarted with another --table-size sees
    // the difference and replaces the service.
    row["table_size"] = row["configured_table_size"].clone();
    row["backends"] = backends.into();
    for k in ["id", "eligible", "configured_table_size"] {
        row.as_object_mut().map(|o| o.remove(k));
    }
    serde_json::from_value::<lb::ServiceSpec>(row)
}

/// The managed LB services' digests in a `show lb digests` reply (name → digest).
pub fn managed_digests(data: &serde_json::Value) -> BTreeMap<String, String> {
    let all = data.as_object().into_iter().flatten();
    all.filter(|(n, _)| is_managed(n)).filter_map(|(n, d)| Some((n.clone(), d.as_str()?.to_string()))).collect()
}

enum Ev {
    Service(Result<Event<K8sService>, watcher::Error>),
    Slice(Result<Event<EndpointSlice>, watcher::Error>),
    /// This node's Node (its eligibility for load balancers' traffic, `/healthz`).
    Node(Result<Event<K8sNode>, watcher::Error>),
}

/// A list in progress (`Init` … `InitDone`).
#[derive(Default)]
struct Listing {
    services: Option<Listed<Service>>,
    slices: Option<Listed<Slice>>,
    /// This node's zone as the Node's list says (`Some(None)`: listed, no zone yet).
    zone: Option<Option<String>>,
    services_done: bool,
    slices_done: bool,
    /// This node's Node listed once (or none is watched): its zone is known.
    node_done: bool,
}

/// This node's zone set from its Node; logged when it changes. The Services to plan.
fn zone_of_node(model: &mut Model, zone: Option<String>) -> BTreeSet<Key> {
    if model.zone() == zone.as_deref() {
        return BTreeSet::new();
    }
    let keys = model.set_zone(zone);
    tracing::info!(zone = model.zone().unwrap_or(""), services = keys.len(), "node zone changed; topology hints re-evaluated");
    keys
}

async fn client(opts: &Options) -> Result<Client, Error> {
    let config = match &opts.kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| Error::Kubeconfig(p.display().to_string(), e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Kubeconfig(p.display().to_string(), e.to_string()))?
        }
        None => kube::Config::infer().await.map_err(|e| Error::Kubeconfig("(inferred)".into(), e.to_string()))?,
    };
    Ok(Client::try_from(config)?)
}

/// An object as parsed; one that does not parse is logged (its kind, name, field and
/// what was expected) and counted, and its last good state is kept by the caller.
fn parse<T>(stats: &mut Stats, r: Result<Option<T>, crate::objects::ObjectError>) -> Result<Option<T>, crate::objects::ObjectError> {
    if let Err(e) = &r {
        stats.bad_objects += 1;
        tracing::warn!(error = %e, "object not understood; its last good state is kept");
    }
    r
}

/// The health checks of the Services `keys` as the model now says.
fn publish<'a>(health: &HealthServer, model: &Model, keys: impl IntoIterator<Item = &'a Key>) {
    for k in keys {
        health.set(k, model.health_check(k));
    }
}

/// Whether the gateway is programmed, for the proxy health server.
fn programmed(health: &HealthServer, ok: bool) {
    if ok {
        health.synced()
    } else {
        health.failed()
    }
}

fn log_unsupported(s: &Service) {
    for e in &s.unsupported {
        tracing::warn!(error = %e, "field not supported");
    }
}

/// Watch and apply until the process is stopped (SIGINT/SIGTERM); the gateway must answer
/// at start (its LB services are read back then).
pub async fn run(opts: Options) -> Result<Stats, Error> {
    opts.settings.validate().map_err(Error::Settings)?;
    let client = client(&opts).await?;
    let mut applier =
        Applier { socket: opts.socket.clone(), stats: Stats::default(), pending: BTreeSet::new(), instance: None, digests_refused: false };
    let mut model = Model::new(opts.settings.clone());
    let adopted = adopt_existing(&mut applier, &mut model)?;
    let health = HealthServer::start(opts.health.clone()).map_err(|e| Error::Socket("health check server".into(), e))?;
    tracing::info!(adopted, socket = %opts.socket.display(), node = opts.settings.node.as_deref().unwrap_or(""), "controller started");
    if opts.settings.node.is_none() {
        // kube-proxy always knows its node (the host name by default); without one no
        // endpoint is local, and Local policies would quietly send nothing anywhere.
        tracing::warn!("no --node-name: no endpoint is this node's, so Services with externalTrafficPolicy or internalTrafficPolicy Local get no traffic through it");
    }

    // kube-proxy's selection (or the named proxy's objects): an object relabelled out of
    // it arrives as deleted, back into it as added.
    let selected = watcher::Config::default().labels_from(&crate::objects::selector(opts.proxy_name.as_ref()));
    let services = watcher::watcher(Api::<K8sService>::all(client.clone()), selected.clone()).default_backoff().map(Ev::Service).boxed();
    let slices = watcher::watcher(Api::<EndpointSlice>::all(client.clone()), selected).default_backoff().map(Ev::Slice).boxed();
    // This node's Node alone (a field selector), as kube-proxy watches it: a node being
    // deleted or tainted for removal says so at /healthz; its zone label is what the
    // Services' topology hints are compared with.
    let node = match &opts.settings.node {
        Some(n) => watcher::watcher(Api::<K8sNode>::all(client), watcher::Config::default().fields(&format!("metadata.name={n}")))
            .default_backoff()
            .map(Ev::Node)
            .boxed(),
        None => futures::stream::pending().boxed(),
    };
    let mut events = futures::stream::select(futures::stream::select(services, slices), node);
    // Without a node name no Node is watched: no zone.
    let mut listing = Listing { node_done: opts.settings.node.is_none(), ..Listing::default() };
    let mut synced = false;
    let started = Instant::now();
    let mut stop = Box::pin(shutdown());
    let mut check = tokio::time::interval(GATEWAY_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The gateway did not answer a request: events only update the model until a
    // resync succeeds.
    let mut lost = false;
    loop {
        let ev = tokio::select! {
            ev = events.next() => match ev { Some(ev) => ev, None => break },
            _ = check.tick(), if synced => {
                check_gateway(&mut applier, &mut model, &mut lost);
                programmed(&health, !lost);
                continue;
            }
            _ = &mut stop => break,
        };
        applier.stats.events += 1;
        let t0 = Instant::now();
        let mut keys: BTreeSet<Key> = BTreeSet::new();
        let mut relisted = false;
        match ev {
            Ev::Service(Ok(e)) => match e {
                Event::Init => listing.services = Some(Listed::default()),
                Event::InitApply(o) => {
                    let parsed = parse(&mut applier.stats, Service::from_k8s(&o));
                    if let Ok(Some(s)) = &parsed {
                        log_unsupported(s);
                    }
                    listing.services.get_or_insert_with(Listed::default).add(parsed);
                }
                Event::InitDone => {
                    keys = model.services_listed(listing.services.take().unwrap_or_default());
                    listing.services_done = true;
                    relisted = true;
                }
                Event::Apply(o) => match parse(&mut applier.stats, Service::from_k8s(&o)) {
                    Ok(Some(s)) => {
                        log_unsupported(&s);
                        keys.insert(model.service_applied(s));
                    }
                    // An ExternalName service (maybe ClusterIP before): nothing of it stays.
                    Ok(None) => {
                        keys.insert(model.service_deleted(&Key::new(
                            o.metadata.namespace.as_deref().unwrap_or("default"),
                            o.metadata.name.as_deref().unwrap_or(""),
                        )));
                    }
                    Err(_) => {}
                },
                Event::Delete(o) => {
                    keys.insert(model.service_deleted(&Key::new(
                        o.metadata.namespace.as_deref().unwrap_or("default"),
                        o.metadata.name.as_deref().unwrap_or(""),
                    )));
                }
            },
            Ev::Slice(Ok(e)) => match e {
                Event::Init => listing.slices = Some(Listed::default()),
                Event::InitApply(o) => {
                    listing.slices.get_or_insert_with(Listed::default).add(parse(&mut applier.stats, Slice::from_k8s(&o)))
                }
                Event::InitDone => {
                    keys = model.slices_listed(listing.slices.take().unwrap_or_default());
                    listing.slices_done = true;
                    relisted = true;
                }
                Event::Apply(o) => {
                    let key = Key::new(o.metadata.namespace.as_deref().unwrap_or("default"), o.metadata.name.as_deref().unwrap_or(""));
                    match parse(&mut applier.stats, Slice::from_k8s(&o)) {
                        Ok(Some(s)) => keys.extend(model.slice_applied(s)),
                        // Relabelled away from any service, or turned FQDN: gone for us.
                        Ok(None) => keys.extend(model.slice_deleted(&key)),
                        Err(_) => {}
                    }
                }
                Event::Delete(o) => {
                    let key = Key::new(o.metadata.namespace.as_deref().unwrap_or("default"), o.metadata.name.as_deref().unwrap_or(""));
                    keys.extend(model.slice_deleted(&key));
                }
            },
            Ev::Node(Ok(e)) => {
                if let Event::Apply(n) | Event::InitApply(n) | Event::Delete(n) = &e {
                    health.node(crate::health::node_eligible(n));
                }
                // The zone as kube-proxy follows it: its Node gone, none.
                match e {
                    Event::Init => listing.zone = Some(None),
                    Event::InitApply(n) => listing.zone = Some(crate::objects::node_zone(&n)),
                    Event::InitDone => {
                        keys = zone_of_node(&mut model, listing.zone.take().flatten());
                        listing.node_done = true;
                    }
                    Event::Apply(n) => keys = zone_of_node(&mut model, crate::objects::node_zone(&n)),
                    Event::Delete(_) => keys = zone_of_node(&mut model, None),
                }
            }
            Ev::Service(Err(e)) | Ev::Slice(Err(e)) | Ev::Node(Err(e)) => {
                tracing::warn!(error = %e, "watch failed; retrying with backoff");
                continue;
            }
        }
        if !synced {
            if !(listing.services_done && listing.slices_done && listing.node_done) {
                continue;
            }
            synced = true;
            let keys = model.keys();
            publish(&health, &model, &keys);
            let n = match applier.apply_all(&mut model, keys) {
                Ok(n) => n,
                Err(e) => {
                    gateway_lost(&mut lost, &e);
                    health.failed();
                    continue;
                }
            };
            health.synced();
            tracing::info!(
                services = model.services(),
                lb_services = model.applied().len(),
                changes = n,
                requests = applier.stats.requests,
                ms = started.elapsed().as_secs_f64() * 1e3,
                apply_ms = t0.elapsed().as_secs_f64() * 1e3,
                "initial sync done"
            );
            if let Some(p) = &opts.health.punt {
                // Every listener of this run is known: a previous run's punt ports go.
                p.reconcile();
            }
            continue;
        }
        publish(&health, &model, &keys);
        if lost {
            continue;
        }
        let n = match applier.apply_all(&mut model, keys.iter().cloned()) {
            Ok(n) => n,
            Err(e) => {
                gateway_lost(&mut lost, &e);
                health.failed();
                continue;
            }
        };
        health.synced();
        if relisted {
            tracing::info!(keys = keys.len(), changes = n, us = t0.elapsed().as_micros() as u64, "resync done");
        } else if n > 0 {
            let names: Vec<String> = keys.iter().map(Key::to_string).collect();
            tracing::info!(services = ?names, changes = n, us = t0.elapsed().as_micros() as u64, "event applied");
        }
    }
    tracing::info!(?applier.stats, "controller stopped");
    Ok(applier.stats)
}

async fn shutdown() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

/// `vecgate k8s`: the controller on a current-thread runtime (it applies one event at a
/// time; the socket calls are short and blocking).
pub fn run_blocking(opts: Options) -> Result<Stats, Error> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| Error::Socket("runtime".into(), e))?;
    rt.block_on(run(opts))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How the fake gateway answers `show instance` and `show lb digests`.
    #[derive(Debug, Clone)]
    struct Knobs {
        /// `show instance`'s `instance` (another: the gateway restarted).
        instance: &'static str,
        digests: Digests,
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Digests {
        /// `control::lb::service_digest` of each service, as the gateway computes them.
        Same,
        /// Another function's (a gateway of another build): every one differs from the
        /// controller's, whatever the service holds.
        Other,
        /// Refused as an unknown request (a release before `show lb digests`).
        Refused,
    }

    impl Default for Knobs {
        fn default() -> Self {
            Knobs { instance: "1-1", digests: Digests::Same }
        }
    }

    type Shared<T> = std::sync::Arc<std::sync::Mutex<T>>;

    /// A gateway on a real control socket (control's server), its LB services in memory:
    /// what the controller's periodic check asks, and the adds it makes.
    fn fake_gateway(path: &std::path::Path, lb: Shared<BTreeMap<String, lb::ServiceSpec>>, knobs: Shared<Knobs>) {
        use control::api::{Reply, Request};
        let (listener, bound) = control::server::bind(path).unwrap();
        std::mem::forget(bound);
        let (jobs, requests) = crossbeam_channel::unbounded::<control::server::Job>();
        control::server::serve(listener, jobs);
        std::thread::spawn(move || {
            for (req, tx) in requests {
                let mut lb = lb.lock().unwrap();
                let knobs = knobs.lock().unwrap().clone();
                let reply = match req {
                    Request::ShowInstance {} => Reply::ok(serde_json::json!({"instance": knobs.instance}), String::new()),
                    Request::ShowLbServices { service } => {
                        let rows: Vec<_> = lb
                            .values()
                            .enumerate()
                            .filter(|(_, s)| service.as_ref().is_none_or(|n| *n == s.name))
                            .map(|(id, s)| control::lb::ServiceRow::new(id as u32, s, s.backends.len(), 211))
                            .collect();
                        Reply::ok(serde_json::to_value(rows).unwrap(), String::new())
                    }
                    Request::ShowLbDigests {} if knobs.digests == Digests::Refused => Reply::err("unknown variant `show_lb_digests`"),
                    Request::ShowLbDigests {} => {
                        let digest = |s: &lb::ServiceSpec| match knobs.digests {
                            Digests::Other => format!("{:016x}", u64::from_str_radix(&control::lb::service_digest(s), 16).unwrap() ^ 1),
                            _ => control::lb::service_digest(s),
                        };
                        let digests: serde_json::Map<_, _> = lb.values().map(|s| (s.name.clone(), digest(s).into())).collect();
                        Reply::ok(digests.into(), String::new())
                    }
                    Request::ShowLbBackends { service } => {
                        let rows: Vec<_> = lb
                            .values()
                            .filter(|s| service.as_ref().is_none_or(|n| *n == s.name))
                            .flat_map(|s| s.backends.iter().map(|b| backend_row_of(&s.name, b)))
                            .collect();
                        Reply::ok(rows.into(), String::new())
                    }
                    Request::LbServiceAdd(spec) if !lb.contains_key(&spec.name) => {
                        lb.insert(spec.name.clone(), spec);
                        Reply::ok(serde_json::Value::Null, String::new())
                    }
                    Request::LbBackendAdd(b) => match lb.get_mut(&b.service) {
                        Some(s) => {
                            s.backends.retain(|x| (x.addr, x.port) != (b.backend.addr, b.backend.port));
                            s.backends.push(b.backend);
                            s.backends.sort_by_key(|x| (x.addr, x.port));
                            Reply::ok(serde_json::Value::Null, String::new())
                        }
                        None => Reply::err("no such service"),
                    },
                    Request::LbBackendDel(r) => match lb.get_mut(&r.service) {
                        Some(s) => {
                            s.backends.retain(|x| (x.addr, x.port) != (r.addr, r.port));
                            Reply::ok(serde_json::Value::Null, String::new())
                        }
                        None => Reply::err("no such service"),
                    },
                    other => Reply::err(format!("not expected: {other:?}")),
                };
                let _ = tx.send(reply);
            }
        });
    }

    /// A backend's `show lb backends` row, as the gateway makes it (control's `BackendRow`).
    fn backend_row_of(service: &str, b: &lb::BackendSpec) -> serde_json::Value {
        let row = control::lb::BackendRow {
            service: service.into(),
            addr: b.addr,
            port: b.port,
            weight: b.weight,
            conditions: b.conditions,
            local: b.local,
            other_zone: b.other_zone,
            eligible: true,
            slots: 1,
        };
        serde_json::to_value(row).unwrap()
    }

    /// The periodic check against a gateway that is still the same process: a managed LB
    /// service deleted by hand (`lb service del`) is added back whole from its Service,
    /// a backend deleted by hand is set again, and one changed in place by hand (`lb
    /// backend set`: another weight, draining, another port) is set back as its slice
    /// says, each counted as restored; a check that finds the gateway as applied reads
    /// only the digests and changes nothing.
    #[test]
    fn the_periodic_check_restores_lb_services_changed_by_hand() {
        use crate::objects::{Service, Slice};
        let path = std::env::temp_dir().join(format!("vecgate-k8s-check-{}.sock", std::process::id()));
        let lb = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        fake_gateway(&path, lb.clone(), Default::default());
        let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "ClusterIP", "clusterIP": "198.18.128.10", "clusterIPs": ["198.18.128.10"], "ipFamilies": ["IPv4"],
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        }))
        .unwrap();
        let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["198.19.1.10"], "conditions": {"ready": true}, "nodeName": "n1"},
                          {"addresses": ["198.19.2.10"], "conditions": {"ready": true}, "nodeName": "n2"}]
        }))
        .unwrap();
        let mut model = Model::new(crate::Settings { node: Some("n1".into()), ..Default::default() });
        let key = model.service_applied(Service::from_k8s(&svc).unwrap().unwrap());
        model.slice_applied(Slice::from_k8s(&slice).unwrap().unwrap());
        let mut applier =
            Applier { socket: path.clone(), stats: Stats::default(), pending: BTreeSet::new(), instance: None, digests_refused: false };
        adopt_existing(&mut applier, &mut model).unwrap();
        assert_eq!(applier.apply_all(&mut model, [key]).unwrap(), 1);
        let programmed = lb.lock().unwrap().clone();
        assert_eq!(programmed.len(), 1);
        let name = programmed.keys().next().unwrap().clone();
        let mut lost = false;

        check_gateway(&mut applier, &mut model, &mut lost);
        assert_eq!((applier.stats.restored, applier.stats.requests), (0, 1), "as applied: nothing to do");

        lb.lock().unwrap().clear(); // `vecgate ctl lb service del …`
        check_gateway(&mut applier, &mut model, &mut lost);
        assert_eq!(*lb.lock().unwrap(), programmed, "added back whole");
        assert_eq!(applier.stats.restored, 1);

        let gone = lb.lock().unwrap().get_mut(&name).unwrap().backends.remove(0); // `lb backend del`
        check_gateway(&mut applier, &mut model, &mut lost);
        assert_eq!(*lb.lock().unwrap(), programmed, "the backend set again: {gone:?}");
        assert_eq!(applier.stats.restored, 2);

        // Changed in place, the backend count and the service's row as they were:
        // `lb backend set … weight 5`, then `lb backend set … terminating`.
        let hand: [fn(&mut lb::BackendSpec); 2] =
            [|b| b.weight = 5, |b| b.conditions = lb::Conditions { ready: false, serving: true, terminating: true }];
        for (i, change) in hand.into_iter().enumerate() {
            let requests = applier.stats.requests;
            change(&mut lb.lock().unwrap().get_mut(&name).unwrap().backends[1]);
            assert_ne!(*lb.lock().unwrap(), programmed);
            check_gateway(&mut applier, &mut model, &mut lost);
            assert_eq!(*lb.lock().unwrap(), programmed, "change {i} set back");
            assert_eq!((applier.stats.restored, applier.stats.requests - requests), (3 + i as u64, 1), "one backend request");
        }
        // A backend moved to another port by hand (`lb backend del` + `add`): the stray one
        // removed, the slice's added again.
        let moved = {
            let mut lb = lb.lock().unwrap();
            let b = &mut lb.get_mut(&name).unwrap().backends[0];
            b.port = 9090;
            *b
        };
        assert!(lb.lock().unwrap()[&name].backends.contains(&moved));
        check_gateway(&mut applier, &mut model, &mut lost);
        assert_eq!(*lb.lock().unwrap(), programmed, "the port moved back");
        assert_eq!(applier.stats.restored, 5);
        check_gateway(&mut applier, &mut model, &mut lost);
        assert_eq!(applier.stats.restored, 5, "as applied again: nothing more");
        assert!(!lost);
        let _ = std::fs::remove_file(&path);
    }

    /// One Service (two endpoints) applied through a fake gateway on a socket of its own.
    struct Applied {
        path: PathBuf,
        lb: Shared<BTreeMap<String, lb::ServiceSpec>>,
        knobs: Shared<Knobs>,
        model: Model,
        applier: Applier,
        /// The LB service's name, and the gateway's LB services as applied.
        name: String,
        programmed: BTreeMap<String, lb::ServiceSpec>,
    }

    impl Drop for Applied {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn web_slice(addrs: &[&str]) -> Slice {
        let endpoints: Vec<_> = addrs.iter().map(|a| serde_json::json!({"addresses": [a], "conditions": {"ready": true}})).collect();
        let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": endpoints
        }))
        .unwrap();
        Slice::from_k8s(&slice).unwrap().unwrap()
    }

    fn apply_web(tag: &str) -> Applied {
        let path = std::env::temp_dir().join(format!("vecgate-k8s-{tag}-{}.sock", std::process::id()));
        let lb = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let knobs = std::sync::Arc::new(std::sync::Mutex::new(Knobs::default()));
        fake_gateway(&path, lb.clone(), knobs.clone());
        let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "ClusterIP", "clusterIP": "198.18.128.10", "clusterIPs": ["198.18.128.10"], "ipFamilies": ["IPv4"],
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        }))
        .unwrap();
        let mut model = Model::new(crate::Settings::default());
        let key = model.service_applied(Service::from_k8s(&svc).unwrap().unwrap());
        model.slice_applied(web_slice(&["198.19.1.10", "198.19.2.10"]));
        let mut applier =
            Applier { socket: path.clone(), stats: Stats::default(), pending: BTreeSet::new(), instance: None, digests_refused: false };
        adopt_existing(&mut applier, &mut model).unwrap();
        assert_eq!(applier.apply_all(&mut model, [key]).unwrap(), 1);
        let programmed = lb.lock().unwrap().clone();
        let name = programmed.keys().next().unwrap().clone();
        Applied { path, lb, knobs, model, applier, name, programmed }
    }

    impl Applied {
        fn check(&mut self, lost: &mut bool) {
            check_gateway(&mut self.applier, &mut self.model, lost)
        }

        /// A backend changed by hand (`vecgate ctl lb backend set …`).
        fn by_hand(&self, change: impl FnOnce(&mut lb::BackendSpec)) {
            change(&mut self.lb.lock().unwrap().get_mut(&self.name).unwrap().backends[1]);
            assert_ne!(*self.lb.lock().unwrap(), self.programmed);
        }

        fn counts(&self) -> (u64, u64) {
            (self.applier.stats.restored, self.applier.stats.requests)
        }
    }

    /// `restored` counts only services whose read-back differs from what was applied: a
    /// gateway whose digests are all other than the controller's (another build) has each
    /// service read back at every check, but one read back as applied is neither counted
    /// nor sent a request; a backend then changed by hand is counted once and set back with
    /// one request, and not again at the next checks.
    #[test]
    fn only_a_service_read_back_changed_is_counted_restored() {
        let mut a = apply_web("restored");
        a.knobs.lock().unwrap().digests = Digests::Other;
        let mut lost = false;
        for i in 0..2 {
            a.check(&mut lost);
            assert_eq!(a.counts(), (0, 1), "check {i}: the digest differs, the service does not");
            assert_eq!(*a.lb.lock().unwrap(), a.programmed);
        }
        a.by_hand(|b| b.weight = 5);
        a.check(&mut lost);
        assert_eq!(*a.lb.lock().unwrap(), a.programmed, "the weight set back");
        assert_eq!(a.counts(), (1, 2), "counted once, one backend request");
        for i in 0..2 {
            a.check(&mut lost);
            assert_eq!(a.counts(), (1, 2), "check {i} after: as applied again");
        }
        assert!(!lost);
    }

    /// A gateway that refuses `show lb digests` (a release before it): warned about once,
    /// not taken as unreachable, and the controller's other work goes on: an event is
    /// applied, and a restart of the gateway is still seen and resynced. What such a
    /// gateway holds is not compared at a check, so a backend changed by hand stays as it
    /// is (no full read-back at each check) until the gateway restarts: the resync then
    /// reads it back and sets it back as the slice says.
    #[test]
    fn a_gateway_without_digests_is_warned_about_once_and_still_served() {
        use std::io::Write;
        #[derive(Clone, Default)]
        struct Log(Shared<Vec<u8>>);
        impl Write for Log {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
        let mut a = apply_web("refused");
        a.knobs.lock().unwrap().digests = Digests::Refused;
        let mut lost = false;
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..3 {
                a.check(&mut lost);
                assert!(!lost, "check {i}: not unreachable");
                assert_eq!(a.counts(), (0, 1), "check {i}");
            }
            a.by_hand(|b| b.weight = 5);
            a.check(&mut lost);
            assert_eq!(a.lb.lock().unwrap()[&a.name].backends[1].weight, 5, "not compared, so not restored");
            assert_eq!(a.counts(), (0, 1));

            // An event: a third endpoint is one backend request.
            let keys = a.model.slice_applied(web_slice(&["198.19.1.10", "198.19.2.10", "198.19.3.10"]));
            assert_eq!(a.applier.apply_all(&mut a.model, keys).unwrap(), 1);
            assert_eq!(a.lb.lock().unwrap()[&a.name].backends.len(), 3);
            a.check(&mut lost);
            assert!(!lost);

            // The gateway restarted (holding what it held): read back, the weight set back.
            a.knobs.lock().unwrap().instance = "2-2";
            a.check(&mut lost);
            assert!(!lost);
            let now = a.lb.lock().unwrap()[&a.name].clone();
            assert_eq!(now.backends.len(), 3);
            assert!(now.backends.iter().all(|b| b.weight == 1), "{now:?}");
            assert_eq!(a.counts(), (0, 3), "the resync's one backend request");
            a.check(&mut lost);
            assert_eq!(a.counts(), (0, 3));
        });
        let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert_eq!(log.matches("the gateway gives no LB service digests").count(), 1, "{log}");
        assert!(!log.contains("gateway unreachable"), "{log}");
    }

    /// A managed LB service read back from the gateway's own rows (control's `ServiceRow`
    /// and `BackendRow`, serialized as the socket sends them) is the spec it was applied
    /// with, every field (its configured table size, not the grown one; its GUE port), so
    /// the digest the check compares is the same; `show lb digests` read for the managed
    /// names only.
    #[test]
    fn a_service_read_back_from_its_rows_is_the_spec_applied() {
        let managed = "default/web:http@198.18.128.10";
        let mut b = lb::BackendSpec::new("198.19.2.10".parse().unwrap(), 8080);
        (b.weight, b.local, b.conditions) = (3, false, lb::Conditions { ready: false, serving: true, terminating: true });
        let spec = lb::ServiceSpec {
            name: managed.into(),
            kind: lb::ServiceType::ClusterIp,
            vip: "198.18.128.10".parse().unwrap(),
            port: 80,
            protocol: lb::Protocol::Tcp,
            backends: vec![lb::BackendSpec::new("198.19.1.10".parse().unwrap(), 8080), b],
            traffic_policy: lb::TrafficPolicy::Local,
            affinity: lb::Affinity::ClientIp { timeout_s: 600 },
            table_size: 1009,
            forwarding: lb::Forwarding::Nat,
            gue_port: 7000,
            source_ranges: vec!["198.18.50.0/24".parse().unwrap()],
        };
        // The gateway lists backends in the order they came; the table grew to 2003.
        let row = serde_json::to_value(control::lb::ServiceRow::new(4, &spec, 1, 2003)).unwrap();
        let backends = spec.backends.iter().rev().map(|b| backend_row(&backend_row_of(managed, b))).collect();
        let back = spec_of_row(&row, backends).unwrap();
        assert_eq!(control::lb::service_digest(&back), control::lb::service_digest(&spec));
        let mut sorted = back.clone();
        sorted.backends.sort_by_key(|b| (b.addr, b.port));
        assert_eq!(sorted, spec);

        let digests = serde_json::json!({"config-dns": "0123456789abcdef", managed: control::lb::service_digest(&spec)});
        let held = managed_digests(&digests);
        assert_eq!(held.keys().collect::<Vec<_>>(), [managed]);
        assert_eq!(held[managed], control::lb::service_digest(&spec));
    }
}
