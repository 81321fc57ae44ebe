//! Body of the `pfcp` fuzz target (`fuzz/fuzz_targets/pfcp.rs`), here so the stable test
//! suite replays the committed corpus through the same code. Invariant beyond "no panic":
//! whatever parses emits to bytes that parse to the same message.

use crate::{Header, Message};

pub fn message(data: &[u8]) {
    let Ok((h, m)) = Message::parse(data) else {
        return;
    };
    let bytes = m.to_bytes(&h);
    let (h2, m2) = Message::parse(&bytes).expect("emitted message parses");
    assert_eq!(h2, Header { msg_type: h.msg_type, ..h });
    assert_eq!(m2, m);
}
