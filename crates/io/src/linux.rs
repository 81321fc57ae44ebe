//! What the Linux backends need to know about a host interface, read from sysfs (no
//! ioctls needed), and the few syscall wrappers they share.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// Errors opening a kernel-backed interface, naming the host interface.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("host interface {0:?} does not exist")]
    NoSuchInterface(String),
    #[error("{what} on {ifname:?}: {source}{}", privileges_hint(.source))]
    Sys { ifname: String, what: &'static str, source: io::Error },
}

/// What to do when the kernel refuses for want of privileges (said where it happens, so
/// every backend's refusal says it the same way).
fn privileges_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::PermissionDenied => {
            "; kernel interfaces need CAP_NET_RAW and CAP_NET_ADMIN (af_xdp also CAP_BPF): run vecgate as root, \
or grant them once with `sudo setcap cap_net_raw,cap_net_admin,cap_bpf+ep \"$(command -v vecgate)\"`"
        }
        _ => "",
    }
}

impl OpenError {
    pub fn sys(ifname: &str, what: &'static str) -> OpenError {
        OpenError::Sys { ifname: ifname.to_string(), what, source: io::Error::last_os_error() }
    }
}

fn sysfs(ifname: &str, attr: &str) -> Option<String> {
    if ifname.is_empty() || ifname.contains('/') || ifname.starts_with('.') {
        return None;
    }
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/{attr}")).ok().map(|s| s.trim().to_string())
}

/// Let a closed output pipe end the process quietly, as it ends other command-line
/// tools (`vecgate ctl show trace | head`): Rust starts with SIGPIPE ignored, so the
/// next write fails and `println!` panics.
pub fn default_sigpipe() {
    // SAFETY: SIG_DFL installs no handler code to run in signal context; called once at
    // start-up, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Nanoseconds the calling thread has run on a CPU (its CPU-time clock), 0 if unknown.
pub fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for the call to fill; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The kernel's index of a host interface.
pub fn if_index(ifname: &str) -> Result<i32, OpenError> {
    sysfs(ifname, "ifindex").and_then(|s| s.parse().ok()).ok_or_else(|| OpenError::NoSuchInterface(ifname.to_string()))
}

/// The MAC address of a host interface.
pub fn mac(ifname: &str) -> Option<[u8; 6]> {
    let s = sysfs(ifname, "address")?;
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for o in &mut out {
        *o = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    Some(out)
}

/// Whether the host interface exists and its carrier is up (`operstate` up or unknown,
/// which is what TAP devices and some virtual links report).
pub fn link_up(ifname: &str) -> bool {
    matches!(sysfs(ifname, "operstate").as_deref(), Some("up") | Some("unknown"))
}

/// Whether the interface still exists (it may be deleted under us).
pub fn exists(ifname: &str) -> bool {
    sysfs(ifname, "ifindex").is_some()
}

/// How many receive queues the host interface has (`queues/rx-N` in sysfs).
pub fn rx_queues(ifname: &str) -> usize {
    if sysfs(ifname, "ifindex").is_none() {
        return 0;
    }
    std::fs::read_dir(format!("/sys/class/net/{ifname}/queues"))
        .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count())
        .unwrap_or(0)
}

/// Watches a host interface's link state from the polling loop: a sysfs read at most
/// every half second, and only when the device is idle (callers check after empty polls).
#[derive(Debug)]
pub struct LinkWatch {
    ifname: String,
    up: bool,
    next_check: u64,
    /// Times the link went from up to down.
    pub down_events: u64,
    /// Times it went down because the interface was deleted.
    pub gone: u64,
}

const LINK_CHECK_SECONDS: f64 = 0.5;

impl LinkWatch {
    pub fn new(ifname: &str) -> LinkWatch {
        LinkWatch { ifname: ifname.to_string(), up: link_up(ifname), next_check: 0, down_events: 0, gone: 0 }
    }

    /// Re-read the link state if it is time; true when it was read (callers piggyback
    /// their own slow reads, such as kernel drop counters, on the same period).
    pub fn poll(&mut self) -> bool {
        let now = engine::clock::now();
        if now < self.next_check {
            return false;
        }
        self.next_check = now + (engine::clock::hz() as f64 * LINK_CHECK_SECONDS) as u64;
        let up = link_up(&self.ifname);
        if self.up && !up {
            self.down_events += 1;
            let gone = !exists(&self.ifname);
            if gone {
                self.gone += 1;
            }
            // A state change, at most one line per check period: never per packet.
            tracing::warn!(host_if = %self.ifname, gone, "link down");
        } else if !self.up && up {
            tracing::info!(host_if = %self.ifname, "link up");
        }
        self.up = up;
        true
    }
}

/// `setsockopt` with a plain value.
pub fn set_opt<T>(fd: &OwnedFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `value` is a live reference to a `T` and the length passed is its size;
    // the kernel only reads that many bytes.
    let r =
        unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (value as *const T).cast(), std::mem::size_of::<T>() as libc::socklen_t) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `getsockopt` into a plain value.
pub fn get_opt<T: Default>(fd: &OwnedFd, level: i32, name: i32) -> io::Result<T> {
    use std::os::fd::AsRawFd;
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a live `T` and `len` its size; the kernel writes at most `len` bytes.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, (&mut v as *mut T).cast(), &mut len) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// A new socket, owned.
pub fn socket(domain: i32, ty: i32, protocol: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; on success the descriptor is new and owned by nobody else.
    let fd = unsafe { libc::socket(domain, ty, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket() and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A shared read/write mapping of `len` bytes of `fd` (a packet ring), unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving it to another thread
// moves the only handle to it.
unsafe impl Send for Mapping {}

impl Mapping {
    pub fn new(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        Mapping::at(fd, len, 0)
    }

    /// A shared mapping of `len` bytes of `fd` from `offset` (AF_XDP selects each of
    /// its rings by a magic offset).
    pub fn at(fd: &OwnedFd, len: usize, offset: u64) -> io::Result<Mapping> {
        use std::os::fd::AsRawFd;
        Mapping::map(len, libc::MAP_SHARED, fd.as_raw_fd(), offset as libc::off_t)
    }

    /// Private zeroed memory of `len` bytes, page aligned (an AF_XDP UMEM).
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        Mapping::map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    }

    fn map(len: usize, flags: i32, fd: i32, offset: libc::off_t) -> io::Result<Mapping> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh mapping chosen by the kernel (null hint); no existing memory is
        // affected; the result is checked against MAP_FAILED.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags | libc::MAP_LOCKED, fd, offset) };
        let p = if p == libc::MAP_FAILED {
            // MAP_LOCKED can fail under a low RLIMIT_MEMLOCK; the memory works unlocked.
            // SAFETY: as above, without MAP_LOCKED.
            let q = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, offset) };
            if q == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            q
        } else {
            p
        };
        Ok(Mapping { ptr: p.cast(), len })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing borrows the
        // mapping past the owner's lifetime (readers copy packets out).
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
