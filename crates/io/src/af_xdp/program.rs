//! The XDP program that hands a host interface's frames to our AF_XDP sockets, loaded,
//! attached and removed by vecgate.
//!
//! The program is six eBPF instructions: `return bpf_redirect_map(&xsks, rx_queue, PASS)`.
//! A frame arriving on queue `q` goes to the socket registered at `xsks[q]`; a queue with
//! no socket passes its frames to the kernel stack. It is assembled here rather than
//! compiled: the loaders in the field (libbpf, aya) take ELF objects built by a BPF
//! toolchain, which a fresh machine does not have, and six instructions do not justify one.
//!
//! Attachment is a BPF link (`BPF_LINK_CREATE`), not the older netlink attach: the
//! kernel detaches the program when the last descriptor of the link closes, so the
//! program goes away with vecgate however it ends (SIGKILL included), and an interface
//! that already has an XDP program is refused (`EBUSY`) instead of having it replaced.

use crate::linux::OpenError;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Where the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before an skb exists (veth supports it).
    Native,
    /// After the skb is built (every driver; slower).
    Generic,
}

impl XdpMode {
    fn flags(self) -> u32 {
        match self {
            XdpMode::Native => XDP_FLAGS_DRV_MODE,
            XdpMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        }
    }
}

const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_MAP_DELETE_ELEM: i32 = 3;
const BPF_PROG_LOAD: i32 = 5;
const BPF_LINK_CREATE: i32 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_PASS: i32 = 2;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `ld_imm64` source register meaning "the immediate is a map descriptor".
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `struct xdp_md`: data, data_end, data_meta, ingress_ifindex, rx_queue_index.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn {
    code: u8,
    /// dst_reg in the low nibble, src_reg in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn { code, regs: (src << 4) | dst, off, imm }
    }
}

/// The redirect program, with the XSKMAP descriptor patched into its `ld_imm64`.
fn redirect_program(map_fd: i32) -> [Insn; 6] {
    const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
    const LD_IMM64: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW
    const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
    const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
    [
        // r2 = ctx->rx_queue_index
        Insn::new(LDX_W, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),
        // r1 = &xsks (two slots: the second holds the upper 32 bits, zero here)
        Insn::new(LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        Insn::new(0, 0, 0, 0, 0),
        // r3 = XDP_PASS: the action when xsks[queue] is empty
        Insn::new(MOV64_K, 3, 0, 0, XDP_PASS),
        // r0 = bpf_redirect_map(r1, r2, r3)
        Insn::new(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        Insn::new(EXIT, 0, 0, 0, 0),
    ]
}

/// `bpf(cmd, attr, size)`, returning a new descriptor or 0.
fn bpf(cmd: i32, attr: &mut [u64; 16]) -> io::Result<i64> {
    // SAFETY: `attr` is a zero-padded 128-byte `union bpf_attr` image that outlives the
    // call; the kernel reads (and for some commands writes) only within the size given.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: `fd` was just returned by bpf() as a new descriptor owned by no one else.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Two `u32`s in one `u64` word of a bpf_attr image (little-endian field order).
fn pair(lo: u32, hi: u32) -> u64 {
    (lo as u64) | ((hi as u64) << 32)
}

/// The loaded program, its socket map and the link that attaches them to an interface.
/// Dropping it (the last holder: every worker's device keeps a share) detaches the program.
#[derive(Debug)]
pub struct XdpRedirect {
    ifname: String,
    mode: XdpMode,
    queues: u32,
    map: OwnedFd,
    // Held for their lifetime: the program stays loaded and attached while they are open.
    _prog: OwnedFd,
    _link: OwnedFd,
}

impl XdpRedirect {
    /// Load the program for an interface with `queues` receive queues and attach it in
    /// `mode` (`None`: native where the driver has it, else generic).
    pub fn attach(ifname: &str, ifindex: i32, queues: u32, mode: Option<XdpMode>) -> Result<XdpRedirect, OpenError> {
        let sys = |what: &'static str| move |source| OpenError::Sys { ifname: ifname.into(), what, source };
        let mut attr = [0u64; 16];
        attr[0] = pair(BPF_MAP_TYPE_XSKMAP, 4); // map_type, key_size
        attr[1] = pair(4, queues.max(1)); // value_size, max_entries
        let map = owned(bpf(BPF_MAP_CREATE, &mut attr).map_err(sys("bpf(BPF_MAP_CREATE xskmap)"))?);
        let insns = redirect_program(map.as_raw_fd());
        let license = c"GPL";
        let mut attr = [0u64; 16];
        attr[0] = pair(BPF_PROG_TYPE_XDP, insns.len() as u32);
        attr[1] = insns.as_ptr() as u64;
        attr[2] = license.as_ptr() as u64;
        // prog_name at byte 48, expected_attach_type at byte 68.
        attr[6] = u64::from_le_bytes(*b"vecgate_");
        attr[7] = u64::from_le_bytes(*b"xsk\0\0\0\0\0");
        attr[8] = pair(0, BPF_XDP);
        let prog = owned(bpf(BPF_PROG_LOAD, &mut attr).map_err(sys("bpf(BPF_PROG_LOAD xdp redirect)"))?);
        let modes = match mode {
            Some(m) => vec![m],
            None => vec![XdpMode::Native, XdpMode::Generic],
        };
        let mut last = None;
        for m in modes {
            let mut attr = [0u64; 16];
            attr[0] = pair(prog.as_raw_fd() as u32, ifindex as u32);
            attr[1] = pair(BPF_XDP, m.flags());
            match bpf(BPF_LINK_CREATE, &mut attr) {
                Ok(fd) => {
                    return Ok(XdpRedirect {
                        ifname: ifname.to_string(),
                        mode: m,
                        queues: queues.max(1),
                        map,
                        _prog: prog,
                        _link: owned(fd),
                    })
                }
                // Another XDP program is attached: say so rather than trying the next mode.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EEXIST) => {
                    return Err(OpenError::Sys {
                        ifname: ifname.into(),
                        what: "attaching the XDP program (the interface already has one)",
                        source: e,
                    })
                }
                Err(e) => last = Some(e),
            }
        }
        Err(OpenError::Sys { ifname: ifname.into(), what: "bpf(BPF_LINK_CREATE xdp)", source: last.expect("one mode tried") })
    }

    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    pub fn queues(&self) -> u32 {
        self.queues
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Send queue `queue`'s frames to the socket `xsk`.
    pub fn register(&self, queue: u32, xsk: &OwnedFd) -> io::Result<()> {
        let key = queue;
        let value = xsk.as_raw_fd() as u32;
        let mut attr = [0u64; 16];
        attr[0] = self.map.as_raw_fd() as u64;
        attr[1] = &key as *const u32 as u64;
        attr[2] = &value as *const u32 as u64;
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
    }

    /// Stop redirecting queue `queue` (its frames go to the kernel stack again).
    pub fn unregister(&self, queue: u32) {
        let key = queue;
        let mut attr = [0u64; 16];
        attr[0] = self.map.as_raw_fd() as u64;
        attr[1] = &key as *const u32 as u64;
        // Closing the socket removes it from the map as well; an error here changes nothing.
        let _ = bpf(BPF_MAP_DELETE_ELEM, &mut attr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_encoding() {
        let p = redirect_program(7);
        // As llvm encodes `r2 = *(u32 *)(r1 + 16)` and `r1 = map[fd 7] ll`.
        assert_eq!((p[0].code, p[0].regs, p[0].off), (0x61, 0x12, 16));
        assert_eq!((p[1].code, p[1].regs, p[1].imm), (0x18, 0x11, 7));
        assert_eq!(p[2], Insn::new(0, 0, 0, 0, 0));
        assert_eq!((p[3].code, p[3].regs, p[3].imm), (0xb7, 0x03, 2));
        assert_eq!((p[4].code, p[4].imm), (0x85, 51));
        assert_eq!(p[5].code, 0x95);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }
}
