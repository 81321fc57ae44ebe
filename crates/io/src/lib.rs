//! I/O backends behind `engine::device::Device`: the packet generator (`pg`), pcap files
//! as an interface's receive and transmit sides (`pcap`), and a null sink. Backends move
//! bytes; they hold no protocol logic (the generator builds its template packets once,
//! at configuration time, with the wire library's emitters).
#![forbid(unsafe_code)]

pub mod null;
pub mod pcap;
pub mod pg;
