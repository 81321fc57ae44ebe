//! Candidate AEAD crates for ESP, sealing and opening in place at 64 and 1400 bytes:
//! `ring` against `aws-lc-rs` (AWS-LC), Intel's IPsec Multi-Buffer library (when the
//! crate is built with it: `cfg(vecgate_ipsec_mb)`, see build.rs) and RustCrypto's
//! `aes-gcm` and `chacha20poly1305`. The figures chose the
//! crate (docs/PERFORMANCE.md, "IPsec ESP: the crypto crate"). A plain timing loop, not
//! criterion: the machine is shared, so each figure is the best of many short rounds
//! (a round of 500 packets takes 40-700 us, shorter than the host's preemptions).
//! Run: `cargo bench -p vecgate-ipsec --bench crypto`; with `--features bench-aws-lc` for
//! the aws-lc-rs rows (builds AWS-LC's C sources, ~6 minutes here).

use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 300;
const ITERS: usize = 500;

fn best_ns(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..ITERS {
            f();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / ITERS as f64);
    }
    best
}

/// The outbound sequence number: one relaxed atomic add per packet (shared by workers,
/// as `sa::Outbound` does it) against a plain counter a pinned SA could use.
fn sequence_numbers() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let a = AtomicU64::new(0);
    let atomic = best_ns(|| {
        black_box(a.fetch_add(1, Ordering::Relaxed));
    });
    let mut plain = 0u64;
    let local = best_ns(|| {
        plain = black_box(plain) + 1;
    });
    println!("{:<34} {:>8.2} ns (plain counter {:.2} ns)", "sequence number: atomic fetch_add", atomic, local);
}

fn main() {
    sequence_numbers();
    use aes_gcm::aead::{AeadInPlace, KeyInit};
    let aad = [1u8, 2, 3, 4, 0, 0, 0, 9];
    let nonce = [7u8; 12];
    println!("{:<34} {:>8} {:>8}", "ns per packet (seal / open)", "64 B", "1400 B");
    let row = |name: &str, f: &mut dyn FnMut(&mut [u8]) -> f64| {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 1400];
        println!("{name:<34} {:>8.1} {:>8.1}", f(&mut a), f(&mut b));
    };
    for (ring_alg, name) in [
        (&ring::aead::AES_128_GCM, "ring AES-128-GCM seal"),
        (&ring::aead::AES_256_GCM, "ring AES-256-GCM seal"),
        (&ring::aead::CHACHA20_POLY1305, "ring ChaCha20-Poly1305 seal"),
    ] {
        let key = ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(ring_alg, &vec![9u8; ring_alg.key_len()]).unwrap());
        row(name, &mut |buf| {
            best_ns(|| {
                let n = ring::aead::Nonce::assume_unique_for_key(nonce);
                let tag = key.seal_in_place_separate_tag(n, ring::aead::Aad::from(aad), black_box(&mut *buf)).unwrap();
                let _ = black_box(tag);
            })
        });
    }
    for (ring_alg, name) in [
        (&ring::aead::AES_128_GCM, "ring AES-128-GCM open"),
        (&ring::aead::AES_256_GCM, "ring AES-256-GCM open"),
        (&ring::aead::CHACHA20_POLY1305, "ring ChaCha20-Poly1305 open"),
    ] {
        let key = ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(ring_alg, &vec![9u8; ring_alg.key_len()]).unwrap());
        row(name, &mut |buf| {
            let n = ring::aead::Nonce::assume_unique_for_key(nonce);
            let tag = key.seal_in_place_separate_tag(n, ring::aead::Aad::from(aad), &mut *buf).unwrap();
            let sealed: Vec<u8> = buf.iter().copied().chain(tag.as_ref().iter().copied()).collect();
            let mut work = sealed.clone();
            best_ns(|| {
                work.copy_from_slice(&sealed);
                let n = ring::aead::Nonce::assume_unique_for_key(nonce);
                black_box(key.open_in_place(n, ring::aead::Aad::from(aad), &mut work).unwrap());
            })
        });
    }
    #[cfg(vecgate_ipsec_mb)]
    if let Some(backend) = ipsec::ipsec_mb::backend_name() {
        println!("({backend})");
        for (key_len, name) in [(16, "intel-ipsec-mb AES-128-GCM"), (32, "intel-ipsec-mb AES-256-GCM")] {
            let key = ipsec::ipsec_mb::GcmKey::new(&vec![9u8; key_len]).unwrap();
            row(&format!("{name} seal"), &mut |buf| {
                best_ns(|| {
                    black_box(key.seal_in_place(&nonce, &aad, black_box(&mut *buf)));
                })
            });
            row(&format!("{name} open"), &mut |buf| {
                let tag = key.seal_in_place(&nonce, &aad, &mut *buf);
                let sealed = buf.to_vec();
                best_ns(|| {
                    buf.copy_from_slice(&sealed);
                    key.open_in_place(&nonce, &aad, black_box(&mut *buf), &tag).unwrap();
                    black_box(&*buf);
                })
            });
        }
    }
    #[cfg(vecgate_ipsec_mb)]
    if ipsec::ipsec_mb::backend_name().is_some() {
        store_forwarding();
    }
    #[cfg(feature = "bench-aws-lc")]
    for (alg, name) in [
        (&aws_lc_rs::aead::AES_128_GCM, "aws-lc-rs AES-128-GCM"),
        (&aws_lc_rs::aead::AES_256_GCM, "aws-lc-rs AES-256-GCM"),
        (&aws_lc_rs::aead::CHACHA20_POLY1305, "aws-lc-rs ChaCha20-Poly1305"),
    ] {
        use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey};
        let key = LessSafeKey::new(UnboundKey::new(alg, &vec![9u8; alg.key_len()]).unwrap());
        row(&format!("{name} seal"), &mut |buf| {
            best_ns(|| {
                let tag =
                    key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), black_box(&mut *buf)).unwrap();
                let _ = black_box(tag);
            })
        });
        row(&format!("{name} open"), &mut |buf| {
            let tag = key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut *buf).unwrap();
            let sealed: Vec<u8> = buf.iter().copied().chain(tag.as_ref().iter().copied()).collect();
            let mut work = sealed.clone();
            best_ns(|| {
                work.copy_from_slice(&sealed);
                black_box(key.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut work).unwrap());
            })
        });
    }
    let rc128 = aes_gcm::Aes128Gcm::new_from_slice(&[9u8; 16]).unwrap();
    row("RustCrypto aes-gcm 128 seal", &mut |buf| {
        best_ns(|| {
            black_box(rc128.encrypt_in_place_detached(&nonce.into(), &aad, black_box(&mut *buf)).unwrap());
        })
    });
    let rc256 = aes_gcm::Aes256Gcm::new_from_slice(&[9u8; 32]).unwrap();
    row("RustCrypto aes-gcm 256 seal", &mut |buf| {
        best_ns(|| {
            black_box(rc256.encrypt_in_place_detached(&nonce.into(), &aad, black_box(&mut *buf)).unwrap());
        })
    });
    let cc = chacha20poly1305::ChaCha20Poly1305::new_from_slice(&[9u8; 32]).unwrap();
    row("RustCrypto chacha20poly1305 seal", &mut |buf| {
        best_ns(|| {
            black_box(cc.encrypt_in_place_detached(&nonce.into(), &aad, black_box(&mut *buf)).unwrap());
        })
    });
}

/// The library's seal of a 70-byte text in 64 buffers of 2 KiB in turn, as the node
/// meets it: the text untouched since the last seal; written with narrow stores just
/// before the call (as the node writes the inner header's TTL and checksum, and the
/// padding and trailer), the header's or the trailer's alone, or one packet earlier;
/// and 64 bytes (whole blocks) whose first and last 16 bytes are each one 16-byte store.
/// The library reads the text with wide and masked vector loads, which the store buffer
/// does not forward from narrower stores: the load waits for the stores to reach the
/// cache (docs/PERFORMANCE.md, sessions 63 and 70).
#[cfg(vecgate_ipsec_mb)]
fn store_forwarding() {
    let key = ipsec::ipsec_mb::GcmKey::new(&[9u8; 16]).unwrap();
    let nonce = [7u8; 12];
    let aad = [1u8, 2, 3, 4, 0, 0, 0, 9];
    let mut bufs = vec![[0u8; 2048]; 64];
    let mut i = 0usize;
    // A macro, not a closure taking the stores: through a `dyn Fn` every variant, the
    // untouched one too, took half as long again (the call is part of what is timed).
    macro_rules! seal {
        ($len:expr, $ahead:expr, |$b:ident, $v:ident| $touch:expr) => {
            best_ns(|| {
                i = (i + 1) % 64;
                let ($b, $v) = (&mut bufs[(i + $ahead) % 64], i as u8);
                $touch;
                black_box(key.seal_in_place(&nonce, &aad, black_box(&mut bufs[i][..$len])));
            })
        };
    }
    fn header(b: &mut [u8; 2048], v: u8) {
        b[8] = v;
        b[10] = v;
        b[11] = v;
    }
    fn trailer(b: &mut [u8; 2048]) {
        for k in 0..4 {
            b[64 + k] = k as u8 + 1;
        }
        b[68] = 4;
        b[69] = 4;
    }
    let untouched = seal!(70, 0, |_b, _v| ());
    let both = seal!(70, 0, |b, v| (header(b, v), trailer(b)));
    let header_only = seal!(70, 0, |b, v| header(b, v));
    let trailer_only = seal!(70, 0, |b, _v| trailer(b));
    let earlier = seal!(70, 1, |b, v| (header(b, v), trailer(b)));
    let wide = seal!(64, 0, |b, v| {
        let mut h: [u8; 16] = b[..16].try_into().unwrap();
        h[8] = v;
        let mut t: [u8; 16] = b[48..64].try_into().unwrap();
        t[14] = v;
        b[..16].copy_from_slice(&black_box(h));
        b[48..64].copy_from_slice(&black_box(t));
    });
    let wide_untouched = seal!(64, 0, |_b, _v| ());
    println!("intel-ipsec-mb seal, 64 buffers in turn (ns): 70 B untouched {untouched:.1}, stores just before {both:.1}");
    println!("  (header's {header_only:.1}, trailer's {trailer_only:.1}), one packet before {earlier:.1};");
    println!("  64 B untouched {wide_untouched:.1}, two 16-byte stores just before {wide:.1}");
    // The wait is for the stores to reach the cache: other work between them and the
    // call hides it once it is long enough.
    fn spin(n: u64) {
        let mut x = black_box(3u64);
        for _ in 0..n {
            x = x.wrapping_mul(0x9e3779b97f4a7c15) ^ (x >> 7);
        }
        black_box(x);
    }
    for n in [20u64, 40] {
        let after = seal!(70, 0, |b, v| (header(b, v), trailer(b), spin(n)));
        let alone = seal!(70, 0, |_b, _v| spin(n));
        println!("  70 B, {n} dependent multiplies before the call: after the stores {after:.1}, alone {alone:.1}");
    }
}
