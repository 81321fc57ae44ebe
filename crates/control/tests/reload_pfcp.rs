//! `[pfcp]` needs a restart to change: a reload that changes it is refused naming the key
//! that changed (`pfcp.heartbeat_interval`), not the section as a whole, and changes
//! nothing; the same file reloads cleanly.

use common::{control_from_file, reload_file};
use control::dataplane::Control;

use crate::common;

const LINKS: &str = r#"
[[interface]]
name = "n3"
type = "null"
mac = "02:00:00:00:07:02"
addresses = ["198.18.7.2/24"]
"#;

fn pfcp(extra: &str) -> String {
    format!("\n[pfcp]\nlisten = \"127.0.0.1:0\"\nn3 = \"198.18.7.2\"\nue_pool = \"198.19.7.0/24\"\n{extra}")
}

/// Reload `text`: Ok(the reply's text) or Err(the refusal).
fn reload(dir: &tempfile::TempDir, c: &mut Control, text: &str) -> Result<String, String> {
    let r = reload_file(dir, c, text);
    if r.ok {
        Ok(r.text)
    } else {
        Err(r.error.unwrap_or_default())
    }
}

#[test]
fn a_changed_pfcp_key_is_refused_by_its_name() {
    let file = LINKS.to_string() + &pfcp("heartbeat_interval = 2.0\n");
    let (dir, mut c) = control_from_file(&file);
    let e = reload(&dir, &mut c, &(LINKS.to_string() + &pfcp("heartbeat_interval = 3.0\n"))).unwrap_err();
    assert!(e.contains("gw.toml: pfcp.heartbeat_interval: "), "{e}");
    assert!(e.contains("restart") && e.contains("nothing was changed"), "{e}");
    let e = reload(&dir, &mut c, &(LINKS.to_string() + &pfcp("heartbeat_interval = 2.0\ngrace = 5.0\n"))).unwrap_err();
    assert!(e.contains("gw.toml: pfcp.grace: "), "{e}");
    let e = reload(&dir, &mut c, LINKS).unwrap_err();
    assert!(e.contains("gw.toml: pfcp: "), "the section dropped: {e}");
    assert!(c.pfcp.is_some());
    assert!(reload(&dir, &mut c, &file).is_ok(), "the running file again");
}
