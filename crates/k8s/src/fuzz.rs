//! Body of the `k8s_objects` fuzz target (`fuzz/fuzz_targets/k8s_objects.rs`), here so the
//! stable test suite replays `fuzz/corpus/k8s_objects` through the same code.
//!
//! An input is a stream of watch events as an API server could deliver them: documents
//! separated by lines `---`, each a JSON object whose `kind` is `Service`,
//! `EndpointSlice` or `Node` (this node's: its zone label, for topology hints; a document
//! with `"deleted": true` beside `kind` is that object's deletion). Each goes the
//! controller's way: read ([`crate::objects`]), mapped ([`crate::desired`]) and diffed
//! ([`crate::model`]), the planned changes recorded as the gateway would accept them.
//! Checked:
//! - nothing panics;
//! - an object refused is refused by name: the error names its kind, its key and a field;
//! - every LB service planned passes the LB's own checks (`ServiceSpec::validate`), and
//!   so does every backend set into one: the gateway never refuses the controller's
//!   requests for what they hold, only for what else it holds;
//! - planning again right after recording a plan gives nothing (an event converges in
//!   one plan), nor does planning every Service after the last event (a resync);
//! - every Service's health check answers, for a port the Service gave.

use crate::desired::Settings;
use crate::model::{Change, Model};
use crate::objects::{Key, Service, Slice};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;

/// Events read from one input at most.
pub const MAX_EVENTS: usize = 32;

/// What an input did, for the corpus replay's checks that its seeds reach the mapping.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Events read as a Service's, a slice's or the Node's.
    pub events: usize,
    /// Objects refused (an error naming them).
    pub refused: usize,
    /// Changes planned (and recorded).
    pub changes: usize,
    /// Services with a health check at the end.
    pub health_checks: usize,
    /// LB services applied at the end with direct server return (`vecgate.io/forwarding`).
    pub direct: usize,
}

pub fn run(data: &[u8]) -> Outcome {
    let mut out = Outcome::default();
    let Ok(text) = std::str::from_utf8(data) else { return out };
    let mut model = Model::new(Settings { node: Some("n1".into()), ..Settings::default() });
    let mut documents = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.trim_end() == "---" {
            documents.push(std::mem::take(&mut current));
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    documents.push(current);
    for doc in documents.iter().take(MAX_EVENTS) {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(doc) else { continue };
        let deleted = value.get("deleted") == Some(&serde_json::Value::Bool(true));
        let keys = match value.get("kind").and_then(|k| k.as_str()) {
            Some("Service") => {
                let Ok(obj) = serde_json::from_value::<core::Service>(value) else { continue };
                service_event(&mut model, &obj, deleted)
            }
            Some("EndpointSlice") => {
                let Ok(obj) = serde_json::from_value::<discovery::EndpointSlice>(value) else { continue };
                slice_event(&mut model, &obj, deleted)
            }
            // This node's Node: its zone label, for topology hints (gone: no zone).
            Some("Node") => {
                let Ok(obj) = serde_json::from_value::<core::Node>(value) else { continue };
                let zone = if deleted { None } else { crate::objects::node_zone(&obj) };
                Some(model.set_zone(zone).into_iter().collect())
            }
            _ => continue,
        };
        out.events += 1;
        match keys {
            None => out.refused += 1,
            Some(keys) => {
                for key in keys {
                    out.changes += apply(&mut model, &key);
                }
            }
        }
    }
    // A resync plans every Service: nothing is left to do after the events' plans.
    for key in model.keys() {
        assert_eq!(model.plan(&key), Vec::new(), "{key}: a resync after the events changes nothing");
        if let Some(check) = model.health_check(&key) {
            assert_ne!(check.port, 0, "{key}");
            out.health_checks += 1;
        }
    }
    out.direct = model.applied().values().filter(|s| s.forwarding.is_encap()).count();
    out
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    Key::new(meta.namespace.as_deref().unwrap_or("default"), meta.name.as_deref().unwrap_or(""))
}

/// The keys to plan; `None` for an object refused.
fn service_event(model: &mut Model, obj: &core::Service, deleted: bool) -> Option<Vec<Key>> {
    let key = key_of(&obj.metadata);
    if deleted {
        return Some(vec![model.service_deleted(&key)]);
    }
    match Service::from_k8s(obj) {
        Ok(Some(svc)) => {
            assert_eq!(svc.key, key);
            for u in &svc.unsupported {
                assert_eq!((u.kind, &u.key), ("service", &key), "{u}");
                assert!(!u.field.is_empty() && !u.message.is_empty(), "{u}");
            }
            Some(vec![model.service_applied(svc)])
        }
        // Without a dataplane part (ExternalName): as the controller takes it, gone.
        Ok(None) => Some(vec![model.service_deleted(&key)]),
        Err(e) => {
            assert_eq!((e.kind, &e.key), ("service", &key), "{e}");
            assert!(!e.field.is_empty() && !e.message.is_empty(), "{e}");
            None
        }
    }
}

fn slice_event(model: &mut Model, obj: &discovery::EndpointSlice, deleted: bool) -> Option<Vec<Key>> {
    let key = key_of(&obj.metadata);
    if deleted {
        return Some(model.slice_deleted(&key));
    }
    match Slice::from_k8s(obj) {
        Ok(Some(slice)) => {
            assert_eq!(slice.key, key);
            Some(model.slice_applied(slice))
        }
        Ok(None) => Some(model.slice_deleted(&key)),
        Err(e) => {
            assert_eq!((e.kind, &e.key), ("endpointslice", &key), "{e}");
            assert!(!e.field.is_empty() && !e.message.is_empty(), "{e}");
            None
        }
    }
}

/// Plan the Service `key`, check each change as the gateway would, record it; the
/// number of changes.
fn apply(model: &mut Model, key: &Key) -> usize {
    let prefix = crate::desired::prefix(key);
    let plan = model.plan(key);
    for change in &plan {
        match change {
            Change::AddService(spec) => {
                assert!(spec.name.starts_with(&prefix), "{} is not {key}'s", spec.name);
                assert!(crate::desired::is_managed(&spec.name), "{}", spec.name);
                if let Err(e) = spec.validate() {
                    panic!("{key}: the LB refuses the planned service {}: {e}", spec.name);
                }
            }
            Change::SetBackend { service, backend } => {
                let spec = model.applied().get(service).unwrap_or_else(|| panic!("{service}: a backend set into no service"));
                if let Err(e) = spec.validate_backend(spec.backends.len(), backend) {
                    panic!("{key}: the LB refuses the planned backend of {service}: {e}");
                }
            }
            Change::DelService(name) | Change::DelBackend { service: name, .. } => {
                assert!(model.applied().contains_key(name), "{name}: deleting what was not applied")
            }
        }
        model.record(change);
        // The request carrying it serializes as the control socket reads it.
        let req = change.request();
        let json = serde_json::to_string(&req).expect("a request serializes");
        assert_eq!(serde_json::from_str::<control::api::Request>(&json).expect("and parses back"), req);
    }
    assert_eq!(model.plan(key), Vec::new(), "{key}: planned again right after {plan:?}");
    plan.len()
}
