//! AES-GCM from Intel's IPsec Multi-Buffer library (intel-ipsec-mb, the library DPDK and
//! VPP's native engines build on), when the crate was built with it (`build.rs`,
//! `cfg(vecgate_ipsec_mb)`). Version 1.3 seals a 64-byte packet in about half the cycles
//! of ring's `seal`, 2.0 in half of 1.3's on AVX-512 CPUs (docs/PERFORMANCE.md, "AES-GCM
//! from intel-ipsec-mb" and session 72): its one call per packet does the counter blocks,
//! the AES and the GHASH of AAD, text and lengths together.
//!
//! The library picks its code for the CPU once (SSE to AVX-512 with VAES); `src/ipsec_mb.c`
//! hands us its AES-GCM function pointers and the packets call those directly. Each key
//! holds the library's expanded keys and GHASH key powers (`gcm_key_data`, made once per
//! SA, zeroed on drop); the per-call state (`gcm_context_data`) lives on the stack.
//!
//! The library is used only when it found AES-NI: without it ring's fallback is the
//! vetted one. `VECGATE_AES_GCM=ring` in the environment chooses ring at start-up
//! anyway (for A/B runs of one binary, or should the library misbehave on some host).
//! The one in use is named by [`crate::crypto::aes_gcm_backend`]: in the start-up log
//! (`dataplane started … aes_gcm=intel-ipsec-mb 2.0.0 (avx512, vaes)`) and in the
//! report of `vecgate bench esp4-encrypt|esp4-decrypt --json` (`aes_gcm`).

use std::ffi::{c_int, CStr};
use std::mem::MaybeUninit;
use std::sync::OnceLock;

/// The library's `gcm_key_data` (1,008 bytes in 1.3, 1,264 in 2.0: more hash key powers),
/// with room to spare; its size is checked against the library's at start-up (a library
/// whose keys do not fit is not used: `aes_gcm_uses_ipsec_mb_when_it_loaded` fails). Its
/// assembly loads the round keys and hash key powers with aligned vector moves, so it is
/// 64-byte aligned (a whole cache line).
#[repr(C, align(64))]
struct KeyData([u8; KEY_DATA_BYTES]);

const KEY_DATA_BYTES: usize = 2048;

/// The library's `gcm_context_data` (88 bytes in 1.3 and 2.0), checked likewise.
#[repr(C, align(16))]
struct Context([u8; 128]);

type Pre = unsafe extern "C" fn(key: *const u8, key_data: *mut KeyData);
type EncDec = unsafe extern "C" fn(
    key_data: *const KeyData,
    ctx: *mut Context,
    out: *mut u8,
    input: *const u8,
    len: u64,
    iv: *const u8,
    aad: *const u8,
    aad_len: u64,
    tag: *mut u8,
    tag_len: u64,
);

/// `struct vg_imb_gcm` in src/ipsec_mb.c.
#[repr(C)]
struct Functions {
    pre128: Pre,
    pre256: Pre,
    enc128: EncDec,
    dec128: EncDec,
    enc256: EncDec,
    dec256: EncDec,
    features: u64,
    arch: u32,
    key_data_size: u32,
    context_size: u32,
}

unsafe extern "C" {
    fn vg_imb_gcm_init(out: *mut Functions) -> c_int;
    fn imb_get_version_str() -> *const std::ffi::c_char;
}

/// The code the library picked, as the glue numbers it (1.x's `IMB_ARCH`; `vg_arch` in
/// src/ipsec_mb.c maps 2.x's to it).
const ARCH_NAMES: [&str; 6] = ["none", "no-aesni", "sse", "avx", "avx2", "avx512"];
const ARCH_SSE: u32 = 2;
/// `IMB_FEATURE_VAES` and `IMB_FEATURE_VPCLMULQDQ`.
const FEATURE_VAES: u64 = 1 << 12;
const FEATURE_VPCLMULQDQ: u64 = 1 << 13;

pub const TAG_LEN: usize = 16;

/// The library, once per process, if it is usable here.
struct Library {
    f: Functions,
    name: String,
}

fn library() -> Option<&'static Library> {
    static LIB: OnceLock<Option<Library>> = OnceLock::new();
    LIB.get_or_init(|| {
        if std::env::var("VECGATE_AES_GCM").is_ok_and(|v| v == "ring") {
            return None;
        }
        let mut f = MaybeUninit::<Functions>::uninit();
        // SAFETY: the glue fills every field of `f` when it returns 0, and its struct has
        // this one's layout (both #[repr(C)], same field order and types).
        let f = unsafe {
            if vg_imb_gcm_init(f.as_mut_ptr()) != 0 {
                return None;
            }
            f.assume_init()
        };
        let fits = f.key_data_size as usize <= std::mem::size_of::<KeyData>() && f.context_size as usize <= std::mem::size_of::<Context>();
        if f.arch < ARCH_SSE || !fits {
            return None;
        }
        // SAFETY: the library returns a static NUL-terminated string.
        let version = unsafe { CStr::from_ptr(imb_get_version_str()) }.to_string_lossy();
        let arch = ARCH_NAMES.get(f.arch as usize).copied().unwrap_or("?");
        let vaes = if f.features & (FEATURE_VAES | FEATURE_VPCLMULQDQ) == FEATURE_VAES | FEATURE_VPCLMULQDQ { ", vaes" } else { "" };
        let name = format!("intel-ipsec-mb {version} ({arch}{vaes})");
        Some(Library { f, name })
    })
    .as_ref()
}

/// The library's name, version and the code it picked for this CPU, or None when AES-GCM
/// falls back to ring here.
pub fn backend_name() -> Option<&'static str> {
    library().map(|l| l.name.as_str())
}

/// An AES-128- or AES-256-GCM key expanded for the library.
pub struct GcmKey {
    data: Box<KeyData>,
    enc: EncDec,
    dec: EncDec,
}

/// The tag did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadTag;

impl GcmKey {
    /// Expand a 16- or 32-byte key; None for another length or when the library is not
    /// usable here (the caller then uses ring).
    pub fn new(key: &[u8]) -> Option<GcmKey> {
        let lib = library()?;
        let (pre, enc, dec) = match key.len() {
            16 => (lib.f.pre128, lib.f.enc128, lib.f.dec128),
            32 => (lib.f.pre256, lib.f.enc256, lib.f.dec256),
            _ => return None,
        };
        let mut data = Box::new(KeyData([0; KEY_DATA_BYTES]));
        // SAFETY: `key` holds the 16 or 32 bytes this key size's `pre` reads; `data` is
        // writable, aligned and at least the library's `gcm_key_data` size (checked when
        // the library was loaded).
        unsafe { pre(key.as_ptr(), &mut *data) };
        Some(GcmKey { data, enc, dec })
    }

    /// One call of the library's AES-GCM `f` (this key's encrypt or decrypt) over `text`
    /// in place, the tag it computes into `tag`.
    #[inline(always)]
    fn run(&self, f: EncDec, nonce: &[u8; 12], aad: &[u8], text: &mut [u8], tag: &mut [u8; TAG_LEN]) {
        // SAFETY: the nonce is 12 bytes.
        unsafe { self.run_raw(f, nonce.as_ptr(), aad, text, tag) }
    }

    /// Encrypt `text` in place, the tag into `tag`, with the nonce's 12 bytes read where
    /// they lie, in the words the caller wrote them as (their bytes in wire order;
    /// `crypto::AeadInputs`), not copied.
    #[inline(always)]
    pub fn seal_words(&self, nonce: &[u64; 2], aad: &[u8], text: &mut [u8], tag: &mut [u8; TAG_LEN]) {
        self.run_words(self.enc, nonce, aad, text, tag)
    }

    /// [`GcmKey::run`] with the nonce in two words (its bytes in wire order).
    #[inline(always)]
    fn run_words(&self, f: EncDec, nonce: &[u64; 2], aad: &[u8], text: &mut [u8], tag: &mut [u8; TAG_LEN]) {
        // SAFETY: two u64 are 16 initialised bytes, of which the library reads 12.
        unsafe { self.run_raw(f, nonce.as_ptr() as *const u8, aad, text, tag) }
    }

    /// [`GcmKey::run`] with the nonce by pointer.
    ///
    /// # Safety
    /// `nonce` must point at 12 readable bytes.
    #[inline(always)]
    unsafe fn run_raw(&self, f: EncDec, nonce: *const u8, aad: &[u8], text: &mut [u8], tag: &mut [u8; TAG_LEN]) {
        let mut ctx = MaybeUninit::<Context>::uninit();
        // SAFETY: the key data was made by this key size's `pre`, and `f` is this key
        // size's; the context is scratch the call initialises (big enough, checked at
        // load); `text` is read and written in place for its length, which the library
        // allows (out == in); the nonce points at the 12 bytes the library reads (the
        // caller's contract; it appends the counter itself); `aad` and `tag` are valid
        // for the lengths passed. The call
        // keeps no pointer.
        unsafe {
            f(
                &*self.data,
                ctx.as_mut_ptr(),
                text.as_mut_ptr(),
                text.as_ptr(),
                text.len() as u64,
                nonce,
                aad.as_ptr(),
                aad.len() as u64,
                tag.as_mut_ptr(),
                TAG_LEN as u64,
            )
        };
    }

    /// Encrypt `text` in place and return the tag.
    #[inline]
    pub fn seal_in_place(&self, nonce: &[u8; 12], aad: &[u8], text: &mut [u8]) -> [u8; TAG_LEN] {
        let mut tag = [0u8; TAG_LEN];
        self.seal_in_place_to(nonce, aad, text, &mut tag);
        tag
    }

    /// Encrypt `text` in place, the tag written into `tag` (the packet's ICV: no copy
    /// through the stack).
    #[inline(always)]
    pub fn seal_in_place_to(&self, nonce: &[u8; 12], aad: &[u8], text: &mut [u8], tag: &mut [u8; TAG_LEN]) {
        self.run(self.enc, nonce, aad, text, tag);
    }

    /// Decrypt `text` in place and verify `tag` (in constant time). On failure the text
    /// is zeroed: no unauthenticated plaintext is left in the buffer.
    #[inline]
    pub fn open_in_place(&self, nonce: &[u8; 12], aad: &[u8], text: &mut [u8], tag: &[u8]) -> Result<(), BadTag> {
        let mut computed = [0u8; TAG_LEN];
        self.run(self.dec, nonce, aad, text, &mut computed);
        Self::verified(&computed, text, tag)
    }

    /// [`GcmKey::open_in_place`] with the nonce read where the caller wrote it, as
    /// [`GcmKey::seal_words`] reads it.
    #[inline(always)]
    pub fn open_words(&self, nonce: &[u64; 2], aad: &[u8], text: &mut [u8], tag: &[u8]) -> Result<(), BadTag> {
        let mut computed = [0u8; TAG_LEN];
        self.run_words(self.dec, nonce, aad, text, &mut computed);
        Self::verified(&computed, text, tag)
    }

    /// The decryption's outcome by its tag: on a mismatch the text is zeroed.
    #[inline(always)]
    fn verified(computed: &[u8; TAG_LEN], text: &mut [u8], tag: &[u8]) -> Result<(), BadTag> {
        if crate::crypto::same_bytes(computed, tag) {
            Ok(())
        } else {
            text.fill(0);
            Err(BadTag)
        }
    }
}

impl Drop for GcmKey {
    /// The expanded keys do not outlive the SA.
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.data.0[..]);
    }
}
