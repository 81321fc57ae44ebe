//! The node's health checks, answered as kube-proxy answers them, so that a cloud load
//! balancer in front of the nodes sends traffic only where it can be served:
//!
//! - for every `type: LoadBalancer` Service with `externalTrafficPolicy: Local`, an HTTP
//!   listener on its `spec.healthCheckNodePort`: 200 while this node has a ready endpoint
//!   of the Service (and the controller keeps the gateway programmed), 503 otherwise, a
//!   JSON body naming the Service and the number of local ready endpoints;
//! - the proxy health server (default `[::]:10256`, kube-proxy's `--healthz-bind-address`):
//!   `/healthz` and `/livez`, 200 while the controller keeps the gateway programmed, 503
//!   once it could not for longer than a bound (KEP-3836: a load balancer checks the nodes
//!   of the other Services there).
//!
//! The decisions are pure functions ([`service_answer`], [`proxy_answer`],
//! [`ProxyHealth`]); [`HealthServer`] runs the listeners on a thread of their own (the
//! controller's loop makes blocking socket calls), opening and closing one per Service as
//! [`HealthServer::set`] says, and answers from the state the controller last published.

use crate::objects::Key;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// kube-proxy's health server port (`--healthz-bind-address`'s default).
pub const PROXY_HEALTH_PORT: u16 = 10256;

/// How long the gateway may go unprogrammed before `/healthz` says 503: kube-proxy's bound
/// (twice its 30 s sync period).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Connections open at once over every health listener; one more is closed as accepted.
pub const MAX_CONNECTIONS: usize = 256;

/// How long one connection may stay open (keep-alive included), and its request headers
/// may take to arrive: a client cannot hold a connection, or its task, longer.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(10);
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a port that could not be bound (in use) is tried again.
pub const BIND_RETRY: Duration = Duration::from_secs(5);

/// One HTTP answer: status, JSON body, and the endpoint weight header of a service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
    /// `X-Load-Balancing-Endpoint-Weight`: the local endpoints, as kube-proxy sends it.
    pub weight: Option<usize>,
}

/// What a Service's health check port answers: 200 when the node has a local ready
/// endpoint and the proxy is healthy, 503 otherwise; the body names the Service, the
/// count and the proxy's health (kube-proxy's fields).
pub fn service_answer(key: &Key, local_endpoints: usize, proxy_healthy: bool) -> Answer {
    let body = serde_json::json!({
        "service": {"namespace": key.namespace, "name": key.name},
        "localEndpoints": local_endpoints,
        "serviceProxyHealthy": proxy_healthy,
    });
    Answer { status: if local_endpoints > 0 && proxy_healthy { 200 } else { 503 }, body: body.to_string(), weight: Some(local_endpoints) }
}

fn rfc3339(t: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t).map(|t| t.to_string()).unwrap_or_default()
}

/// What the proxy health server answers at `path`: `/healthz` and `/livez`, 200 or 503 by
/// `healthy`, with the last successful sync and the current time (RFC 3339); `/healthz`
/// also says `nodeEligible` and is 503 without it (the node is going away: load balancers
/// drain it), `/livez` does not look at it. `None` for any other path (404).
pub fn proxy_answer(path: &str, healthy: bool, node_eligible: bool, last_updated: Option<SystemTime>, now: SystemTime) -> Option<Answer> {
    let last = last_updated.map(rfc3339).unwrap_or_default();
    let (body, ok) = match path {
        "/healthz" => {
            (serde_json::json!({"lastUpdated": last, "currentTime": rfc3339(now), "nodeEligible": node_eligible}), healthy && node_eligible)
        }
        "/livez" => (serde_json::json!({"lastUpdated": last, "currentTime": rfc3339(now)}), healthy),
        _ => return None,
    };
    Some(Answer { status: if ok { 200 } else { 503 }, body: body.to_string(), weight: None })
}

/// The cluster autoscaler's taint on a node it is about to remove.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// Whether this node should still get load balancers' traffic, as kube-proxy reads its
/// Node: not when it is being deleted (`deletionTimestamp`) or the cluster autoscaler has
/// tainted it for removal.
pub fn node_eligible(node: &k8s_openapi::api::core::v1::Node) -> bool {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default();
    node.metadata.deletion_timestamp.is_none() && !taints.iter().any(|t| t.key == TO_BE_DELETED_TAINT)
}

/// Whether the controller keeps the gateway programmed: healthy until a request to the
/// gateway fails, and still for `timeout` after (a gateway restarting, a slow reply);
/// unhealthy from then on until a sync succeeds again.
#[derive(Debug, Clone)]
pub struct ProxyHealth {
    pub timeout: Duration,
    failing_since: Option<Instant>,
    last_updated: Option<SystemTime>,
}

impl ProxyHealth {
    pub fn new(timeout: Duration) -> ProxyHealth {
        ProxyHealth { timeout, failing_since: None, last_updated: None }
    }

    /// A sync with the gateway succeeded (changes applied, or a check found it as applied).
    pub fn synced(&mut self, now: SystemTime) {
        self.failing_since = None;
        self.last_updated = Some(now);
    }

    /// The gateway did not answer; the first failure of a run starts the clock.
    pub fn failed(&mut self, now: Instant) {
        self.failing_since.get_or_insert(now);
    }

    pub fn healthy(&self, now: Instant) -> bool {
        self.failing_since.is_none_or(|t| now.saturating_duration_since(t) < self.timeout)
    }

    pub fn last_updated(&self) -> Option<SystemTime> {
        self.last_updated
    }
}

/// What the listeners answer from: each Service's port and local ready endpoints, and the
/// proxy's health.
#[derive(Debug)]
struct State {
    checks: BTreeMap<Key, Check>,
    proxy: ProxyHealth,
    /// [`node_eligible`] of this node's Node (true until one is seen).
    node_eligible: bool,
}

/// One Service's health check: its `healthCheckNodePort` and local ready endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    pub port: u16,
    pub local_endpoints: usize,
}

/// `--healthz-bind-address`: the proxy health server's address and port, or none ("").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyAddress(pub Option<SocketAddr>);

impl std::str::FromStr for ProxyAddress {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" => Ok(ProxyAddress(None)),
            a => a
                .parse()
                .map(|a| ProxyAddress(Some(a)))
                .map_err(|_| "expected an address and port (0.0.0.0:10256, [::]:10256) or \"\"".into()),
        }
    }
}

/// Where the listeners bind.
#[derive(Debug, Clone)]
pub struct HealthOptions {
    /// The Services' health check ports' address (`::`: every address of both families
    /// where `net.ipv6.bindv6only` is 0, Linux's default).
    pub service_address: IpAddr,
    /// The proxy health server (`None`: not served).
    pub proxy_address: Option<SocketAddr>,
    pub timeout: Duration,
    /// `--punt-health-ports`: each port listened on is punted by the gateway while it is
    /// (`crate::punt`); `None`: the operator lists them in `[punt]`, or none are needed.
    pub punt: Option<crate::punt::HealthPunt>,
}

/// The listeners' thread and the state they answer from.
pub struct HealthServer {
    state: Arc<Mutex<State>>,
    ports: watch::Sender<BTreeMap<Key, u16>>,
}

impl HealthServer {
    /// Start the listeners' thread (its own runtime); the proxy health server listens at
    /// once, the Services' ports as [`HealthServer::set`] names them.
    pub fn start(opts: HealthOptions) -> std::io::Result<HealthServer> {
        let state = Arc::new(Mutex::new(State { checks: BTreeMap::new(), proxy: ProxyHealth::new(opts.timeout), node_eligible: true }));
        let (ports, rx) = watch::channel(BTreeMap::new());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let shared = state.clone();
        std::thread::Builder::new().name("health".into()).spawn(move || rt.block_on(serve(opts, shared, rx)))?;
        Ok(HealthServer { state, ports })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One Service's health check now (`None`: it has none, its port is closed).
    pub fn set(&self, key: &Key, check: Option<Check>) {
        let mut st = self.lock();
        let old = match check {
            Some(c) => st.checks.insert(key.clone(), c),
            None => st.checks.remove(key),
        };
        if old.map(|c| c.port) != check.map(|c| c.port) {
            let ports: BTreeMap<Key, u16> = st.checks.iter().map(|(k, c)| (k.clone(), c.port)).collect();
            drop(st);
            let _ = self.ports.send(ports);
        }
    }

    pub fn synced(&self) {
        self.lock().proxy.synced(SystemTime::now());
    }

    pub fn failed(&self) {
        self.lock().proxy.failed(Instant::now());
    }

    /// This node's Node as last seen ([`node_eligible`]); logged when it changes.
    pub fn node(&self, eligible: bool) {
        let was = std::mem::replace(&mut self.lock().node_eligible, eligible);
        if was != eligible {
            tracing::info!(eligible, "node eligibility for load balancers' traffic (/healthz)");
        }
    }
}

type Body = Full<Bytes>;

fn response(a: Answer) -> Response<Body> {
    let mut r = Response::builder().status(a.status).header("Content-Type", "application/json").header("X-Content-Type-Options", "nosniff");
    if let Some(w) = a.weight {
        r = r.header("X-Load-Balancing-Endpoint-Weight", w);
    }
    r.body(Full::new(Bytes::from(a.body))).unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n"))
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert("Content-Type", hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r.headers_mut().insert("X-Content-Type-Options", hyper::header::HeaderValue::from_static("nosniff"));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        r.headers_mut().insert("Allow", hyper::header::HeaderValue::from_static("GET, HEAD"));
    }
    r
}

/// What a listener serves: one Service's check (any path, as kube-proxy: the load
/// balancer picks the path), or the proxy's `/healthz` and `/livez`.
#[derive(Debug, Clone)]
enum Role {
    Service(Key),
    Proxy,
}

/// The answer to one request: GET and HEAD only (405 otherwise).
fn answer(role: &Role, state: &Mutex<State>, method: &Method, path: &str) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    let st = state.lock().unwrap_or_else(|p| p.into_inner());
    let healthy = st.proxy.healthy(Instant::now());
    match role {
        Role::Service(key) => {
            let n = st.checks.get(key).map_or(0, |c| c.local_endpoints);
            response(service_answer(key, n, healthy))
        }
        Role::Proxy => match proxy_answer(path, healthy, st.node_eligible, st.proxy.last_updated(), SystemTime::now()) {
            Some(a) => response(a),
            None => plain(StatusCode::NOT_FOUND, "404 page not found\n"),
        },
    }
}

/// Accept and answer on `listener` until the task is aborted (its connections with it).
async fn accept(listener: TcpListener, role: Role, state: Arc<Mutex<State>>, limit: Arc<Semaphore>) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        // Reap finished connections so the set does not grow with them.
        while conns.try_join_next().is_some() {}
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors and the like: wait rather than spin.
                tracing::debug!(error = %e, "health check accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Past the bound the connection is closed as accepted: no task for it.
        let Ok(permit) = limit.clone().try_acquire_owned() else { continue };
        let (role, state) = (role.clone(), state.clone());
        conns.spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let r = answer(&role, &state, req.method(), req.uri().path());
                std::future::ready(Ok::<_, std::convert::Infallible>(r))
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(8192)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
            drop(permit);
        });
    }
}

/// The listeners' loop: the proxy health server, and one listener per Service port as
/// the controller publishes them; a port that cannot be bound is logged once and tried
/// again every [`BIND_RETRY`].
async fn serve(opts: HealthOptions, state: Arc<Mutex<State>>, mut ports: watch::Receiver<BTreeMap<Key, u16>>) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    if let Some(addr) = opts.proxy_address {
        let (state, limit, punt) = (state.clone(), limit.clone(), opts.punt.clone());
        tokio::spawn(async move {
            let mut logged = false;
            loop {
                match TcpListener::bind(addr).await {
                    Ok(l) => {
                        tracing::info!(address = %addr, "proxy health server listening (/healthz, /livez)");
                        if let Some(p) = &punt {
                            p.open(addr.port());
                        }
                        return accept(l, Role::Proxy, state, limit).await;
                    }
                    Err(e) if !logged => {
                        logged = true;
                        tracing::warn!(address = %addr, error = %e, "proxy health server cannot listen; retrying");
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(BIND_RETRY).await;
            }
        });
    }
    // Open listeners by Service, and ports that could not be bound (logged once each).
    let mut open: HashMap<Key, (u16, tokio::task::JoinHandle<()>)> = HashMap::new();
    let mut unbound: BTreeMap<Key, u16> = BTreeMap::new();
    let mut retry = tokio::time::interval(BIND_RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            r = ports.changed() => if r.is_err() { return },
            _ = retry.tick(), if !unbound.is_empty() => {}
        }
        let want = ports.borrow_and_update().clone();
        // Closed first (awaited, so the port is free): a port may pass to another Service.
        let gone: Vec<Key> = open.iter().filter(|(k, (p, _))| want.get(*k) != Some(p)).map(|(k, _)| k.clone()).collect();
        for k in gone {
            if let Some((port, task)) = open.remove(&k) {
                task.abort();
                let _ = task.await;
                tracing::info!(service = %k, port, "health check port closed");
                if let Some(p) = &opts.punt {
                    p.close(port);
                }
            }
        }
        unbound.retain(|k, p| want.get(k) == Some(p));
        let new: Vec<(Key, u16)> = want.iter().filter(|(k, _)| !open.contains_key(*k)).map(|(k, &p)| (k.clone(), p)).collect();
        for (k, port) in new {
            let k = &k;
            match TcpListener::bind(SocketAddr::new(opts.service_address, port)).await {
                Ok(l) => {
                    if unbound.remove(k).is_some() {
                        tracing::info!(service = %k, port, "health check port bound at last");
                    } else {
                        tracing::info!(service = %k, port, "health check port open");
                    }
                    if let Some(p) = &opts.punt {
                        p.open(port);
                    }
                    let task = tokio::spawn(accept(l, Role::Service(k.clone()), state.clone(), limit.clone()));
                    open.insert(k.clone(), (port, task));
                }
                Err(e) => {
                    if unbound.insert(k.clone(), port) != Some(port) {
                        tracing::warn!(service = %k, port, address = %opts.service_address, error = %e,
                            "health check port cannot be bound (spec.healthCheckNodePort); retrying every 5 s");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(a: &Answer) -> serde_json::Value {
        serde_json::from_str(&a.body).unwrap()
    }

    /// kube-proxy's decision: 200 only with a local ready endpoint and a healthy proxy;
    /// the body names the Service and gives the count and the proxy's health, the weight
    /// header the count.
    #[test]
    fn a_service_is_healthy_with_a_local_endpoint_and_a_healthy_proxy() {
        let key = Key::new("shop", "web");
        let cases = [(2, true, 200), (1, true, 200), (0, true, 503), (1, false, 503), (0, false, 503)];
        for (n, proxy, status) in cases {
            let a = service_answer(&key, n, proxy);
            assert_eq!(a.status, status, "{n} {proxy}");
            assert_eq!(a.weight, Some(n));
            assert_eq!(
                body(&a),
                serde_json::json!({"service": {"namespace": "shop", "name": "web"}, "localEndpoints": n, "serviceProxyHealthy": proxy})
            );
        }
    }

    /// `/healthz` and `/livez` only; 503 when unhealthy; the times in RFC 3339.
    #[test]
    fn the_proxy_answers_healthz_and_livez_only() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let last = now - Duration::from_secs(3);
        let h = proxy_answer("/healthz", true, true, Some(last), now).unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(
            body(&h),
            serde_json::json!({"lastUpdated": "2027-01-15T07:59:57Z", "currentTime": "2027-01-15T08:00:00Z", "nodeEligible": true})
        );
        assert_eq!(proxy_answer("/healthz", false, true, Some(last), now).unwrap().status, 503);
        let l = proxy_answer("/livez", false, true, None, now).unwrap();
        assert_eq!((l.status, body(&l)), (503, serde_json::json!({"lastUpdated": "", "currentTime": "2027-01-15T08:00:00Z"})));
        assert_eq!(proxy_answer("/livez", true, true, None, now).unwrap().status, 200);
        // A node going away: /healthz 503 and says so, /livez does not look.
        let h = proxy_answer("/healthz", true, false, Some(last), now).unwrap();
        assert_eq!((h.status, &body(&h)["nodeEligible"]), (503, &serde_json::json!(false)));
        assert_eq!(proxy_answer("/livez", true, false, None, now).unwrap().status, 200);
        for p in ["/", "/healthz/", "/healthzz", "/metrics", ""] {
            assert_eq!(proxy_answer(p, true, true, None, now), None, "{p:?}");
        }
    }

    /// kube-proxy's reading of its Node: eligible unless being deleted or tainted by the
    /// cluster autoscaler for removal (other taints do not count).
    #[test]
    fn a_node_being_deleted_or_tainted_for_removal_is_not_eligible() {
        let node = |v: serde_json::Value| serde_json::from_value::<k8s_openapi::api::core::v1::Node>(v).unwrap();
        assert!(node_eligible(&node(serde_json::json!({"metadata": {"name": "n1"}}))));
        let other = serde_json::json!({"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}});
        assert!(node_eligible(&node(other)));
        let tainted = serde_json::json!({"metadata": {"name": "n1"}, "spec": {"taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}]}});
        assert!(!node_eligible(&node(tainted)));
        let deleting = serde_json::json!({"metadata": {"name": "n1", "deletionTimestamp": "2026-12-06T08:00:00Z"}});
        assert!(!node_eligible(&node(deleting)));
    }

    /// Healthy until a failure has lasted the timeout; one sync makes it healthy again,
    /// and a later failure starts a new clock (not the first one's).
    #[test]
    fn the_proxy_is_unhealthy_once_the_gateway_failed_for_the_timeout() {
        let t0 = Instant::now();
        let mut h = ProxyHealth::new(Duration::from_secs(10));
        assert!(h.healthy(t0), "healthy at start");
        h.failed(t0);
        h.failed(t0 + Duration::from_secs(30)); // a second failure does not restart the clock
        assert!(h.healthy(t0 + Duration::from_secs(9)));
        assert!(!h.healthy(t0 + Duration::from_secs(10)));
        h.synced(SystemTime::now());
        assert!(h.healthy(t0 + Duration::from_secs(11)));
        assert!(h.last_updated().is_some());
        h.failed(t0 + Duration::from_secs(20));
        assert!(h.healthy(t0 + Duration::from_secs(29)));
        assert!(!h.healthy(t0 + Duration::from_secs(31)));
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    /// One raw request (`Connection: close`), the whole response; "" when the server
    /// closed the connection without one.
    fn send(port: u16, request: &[u8]) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(request).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn get(port: u16, path: &str) -> String {
        send(port, format!("GET {path} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n").as_bytes())
    }

    /// Until `ok`, within `timeout`: generous bounds, met in milliseconds unless the code
    /// is wrong (a loaded CI machine must not fail them).
    fn wait(what: &str, mut ok: impl FnMut() -> bool, timeout: Duration) {
        let end = Instant::now() + timeout;
        while !ok() {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn listening(port: u16) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    }

    fn json_of(response: &str) -> serde_json::Value {
        serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap()
    }

    /// `--punt-health-ports`' hooks: each port is reported open once its listener is
    /// (the proxy's and a Service's), and closed once the Service's listener closes.
    #[test]
    fn the_listeners_report_their_ports_to_the_punt_thread() {
        use crate::punt::Msg;
        let (pp, sp) = (free_port(), free_port());
        let (punt, seen) = crate::punt::HealthPunt::recording();
        let h = HealthServer::start(HealthOptions {
            service_address: "127.0.0.1".parse().unwrap(),
            proxy_address: Some(SocketAddr::from(([127, 0, 0, 1], pp))),
            timeout: Duration::ZERO,
            punt: Some(punt),
        })
        .unwrap();
        let next = || seen.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(next(), Msg::Open(pp));
        assert!(listening(pp), "reported once listening");
        let web = Key::new("shop", "web");
        h.set(&web, Some(Check { port: sp, local_endpoints: 1 }));
        assert_eq!(next(), Msg::Open(sp));
        assert!(listening(sp));
        h.set(&web, Some(Check { port: sp, local_endpoints: 0 }));
        h.set(&web, None);
        assert_eq!(next(), Msg::Close(sp), "no message for a count that changed");
        assert!(!listening(sp), "reported once closed");
        assert!(seen.recv_timeout(Duration::from_millis(300)).is_err(), "nothing more");
    }

    /// The listeners over real sockets: the proxy's paths, a Service's port opened,
    /// answering from what the controller publishes (the proxy's health included), closed
    /// with its Service; odd requests get HTTP errors; a port in use is taken once freed;
    /// connections past the bound are closed as accepted, and served again once others end.
    #[test]
    fn the_listeners_answer_open_close_and_bound_their_connections() {
        let (pp, sp, busy) = (free_port(), free_port(), free_port());
        let h = HealthServer::start(HealthOptions {
            service_address: "127.0.0.1".parse().unwrap(),
            proxy_address: Some(SocketAddr::from(([127, 0, 0, 1], pp))),
            timeout: Duration::ZERO,
            punt: None,
        })
        .unwrap();
        wait("the proxy health server", || listening(pp), Duration::from_secs(30));
        let r = get(pp, "/healthz");
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
        assert_eq!(json_of(&r)["nodeEligible"], true);
        assert!(get(pp, "/livez").starts_with("HTTP/1.1 200 "));
        assert!(get(pp, "/metrics").starts_with("HTTP/1.1 404 "));
        let r = send(pp, b"POST /healthz HTTP/1.1\r\nHost: node\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi");
        assert!(r.starts_with("HTTP/1.1 405 ") && r.to_ascii_lowercase().contains("allow: get, head"), "{r}");
        let r = send(pp, b"\x16\x03\x01\x00\xa5garbage\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
        let r = send(pp, format!("GET /{} HTTP/1.1\r\nHost: node\r\n\r\n", "a".repeat(20000)).as_bytes());
        assert!(r.starts_with("HTTP/1.1 431 "), "request line and headers past 8 KiB: {r}");

        let web = Key::new("shop", "web");
        assert!(!listening(sp));
        h.set(&web, Some(Check { port: sp, local_endpoints: 2 }));
        wait("the service's port", || listening(sp), Duration::from_secs(30));
        let r = get(sp, "/any/path");
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
        let head = r.to_ascii_lowercase();
        for h in ["content-type: application/json", "x-content-type-options: nosniff", "x-load-balancing-endpoint-weight: 2"] {
            assert!(head.contains(h), "{h}: {r}");
        }
        assert_eq!(
            json_of(&r),
            serde_json::json!({"service": {"namespace": "shop", "name": "web"}, "localEndpoints": 2, "serviceProxyHealthy": true})
        );
        h.set(&web, Some(Check { port: sp, local_endpoints: 0 }));
        assert!(get(sp, "/").starts_with("HTTP/1.1 503 "));
        h.set(&web, Some(Check { port: sp, local_endpoints: 1 }));
        assert!(get(sp, "/").starts_with("HTTP/1.1 200 "));
        let r = send(sp, b"HEAD / HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 ") && r.ends_with("\r\n\r\n"), "no body: {r}");
        assert!(send(sp, b"DELETE / HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n").starts_with("HTTP/1.1 405 "));

        // The gateway unreachable (timeout 0: at once): 503 everywhere, back with a sync.
        h.failed();
        let r = get(sp, "/");
        assert!(r.starts_with("HTTP/1.1 503 ") && json_of(&r)["serviceProxyHealthy"] == false, "{r}");
        assert!(get(pp, "/healthz").starts_with("HTTP/1.1 503 "));
        assert!(get(pp, "/livez").starts_with("HTTP/1.1 503 "));
        h.synced();
        assert!(get(sp, "/").starts_with("HTTP/1.1 200 "));
        assert!(get(pp, "/healthz").starts_with("HTTP/1.1 200 "));

        // Idle connections up to the bound hold it; the next is closed unanswered.
        let idle: Vec<_> = (0..MAX_CONNECTIONS).map(|_| std::net::TcpStream::connect(("127.0.0.1", sp)).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(get(sp, "/"), "", "past the bound");
        drop(idle);
        wait("a connection served again", || get(sp, "/").starts_with("HTTP/1.1 200 "), Duration::from_secs(30));

        // A port in use: taken once freed (retried), the other Service's port unaffected.
        let db = Key::new("shop", "db");
        let squatter = std::net::TcpListener::bind(("127.0.0.1", busy)).unwrap();
        h.set(&db, Some(Check { port: busy, local_endpoints: 3 }));
        std::thread::sleep(Duration::from_millis(300));
        assert!(get(sp, "/").starts_with("HTTP/1.1 200 "));
        drop(squatter);
        wait("the freed port", || listening(busy), BIND_RETRY + Duration::from_secs(30));
        let r = get(busy, "/");
        assert_eq!(json_of(&r)["localEndpoints"], 3, "{r}");

        // The Service gone: its port closed, the other kept.
        h.set(&web, None);
        wait("the port closed", || !listening(sp), Duration::from_secs(30));
        assert!(get(busy, "/").starts_with("HTTP/1.1 200 "));
        // Its port moved: the old one closed, the new one open.
        let moved = free_port();
        h.set(&db, Some(Check { port: moved, local_endpoints: 3 }));
        wait("the new port", || listening(moved), Duration::from_secs(30));
        assert!(!listening(busy));
    }
}
