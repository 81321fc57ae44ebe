//! ESP transforms: AES-GCM (RFC 4106), ChaCha20-Poly1305 (RFC 7634), AES-CBC with
//! HMAC-SHA-256-128 (RFC 3602, RFC 4868) and NULL encryption with or without
//! HMAC-SHA-256-128 (RFC 2410). Keys are expanded once per SA ([`Transform::new`]); a
//! packet is sealed and opened in place, in the buffer that carries it, without
//! allocating.
//!
//! The AEADs and HMAC come from `ring`, AES-CBC from RustCrypto's `aes` + `cbc` (ring has
//! no CBC). `ring` was chosen by measurement: docs/PERFORMANCE.md, "IPsec ESP: the crypto
//! crate" (`cargo bench -p vecgate-ipsec --bench crypto`). AES-GCM comes from Intel's
//! IPsec Multi-Buffer library instead where the crate was built with it and the CPU has
//! AES-NI ([`crate::ipsec_mb`]: 1.3 about half ring's cycles at 64 B, 2.0 a fifth);
//! [`aes_gcm_backend`] names the one in use.
//!
//! The AEAD IV is the 64-bit sequence number: unique per key as RFC 4106 §3.1 asks,
//! since an SA never wraps its counter ([`crate::sa`]). The CBC IV must be unpredictable
//! (RFC 3602 §2.3): it is the sequence number encrypted under a second AES key drawn at
//! random when the SA is made, so no random numbers are drawn per packet.

use aes::cipher::{BlockEncrypt, BlockSizeUser, InnerIvInit, KeyInit};
use ring::aead;
use ring::hmac;
use wire::esp::{EspLayout, HEADER_LEN};

/// The algorithm pair of an SA, by the names config, API and bench use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// NULL encryption, no integrity (RFC 2410; for benchmarks and the seed's SPD test).
    Null,
    /// NULL encryption with HMAC-SHA-256-128.
    NullSha256,
    #[serde(rename = "aes-gcm-128")]
    AesGcm128,
    #[serde(rename = "aes-gcm-256")]
    AesGcm256,
    Chacha20Poly1305,
    /// AES-CBC (128- or 256-bit key, by its length) with HMAC-SHA-256-128.
    AesCbcSha256,
}

impl Algorithm {
    pub const ALL: [Algorithm; 6] = [
        Algorithm::Null,
        Algorithm::NullSha256,
        Algorithm::AesGcm128,
        Algorithm::AesGcm256,
        Algorithm::Chacha20Poly1305,
        Algorithm::AesCbcSha256,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Null => "null",
            Algorithm::NullSha256 => "null-sha256",
            Algorithm::AesGcm128 => "aes-gcm-128",
            Algorithm::AesGcm256 => "aes-gcm-256",
            Algorithm::Chacha20Poly1305 => "chacha20-poly1305",
            Algorithm::AesCbcSha256 => "aes-cbc-sha256",
        }
    }

    /// The encryption key lengths accepted, in bytes (for the AEADs, with the 4-byte
    /// salt at the end, as IKEv2 derives the keying material: RFC 4106 §8.1).
    pub const fn enc_key_lens(self) -> &'static [usize] {
        match self {
            Algorithm::Null | Algorithm::NullSha256 => &[0],
            Algorithm::AesGcm128 => &[20],
            Algorithm::AesGcm256 | Algorithm::Chacha20Poly1305 => &[36],
            Algorithm::AesCbcSha256 => &[16, 32],
        }
    }

    /// The integrity key length in bytes (0: none, or inside the AEAD).
    pub const fn integ_key_len(self) -> usize {
        match self {
            Algorithm::NullSha256 | Algorithm::AesCbcSha256 => 32,
            _ => 0,
        }
    }

    /// The padding the encrypt nodes choose where the link has room for it: AES-GCM's
    /// ciphertext in whole AES blocks. RFC 4303 §2.4 lets a sender pad beyond the
    /// alignment (receivers take any padding), and `ring` seals a trailing partial block
    /// in a second pass: at 64 B that pass cost ~80 of esp4-encrypt's ~380 cycles
    /// (docs/PERFORMANCE.md). Receiving still checks [`Algorithm::layout`]'s alignment.
    pub const fn block_align(self) -> usize {
        match self {
            Algorithm::AesGcm128 | Algorithm::AesGcm256 => 16,
            _ => self.layout().align,
        }
    }

    pub const fn layout(self) -> EspLayout {
        match self {
            Algorithm::Null => EspLayout { iv_len: 0, icv_len: 0, align: 4 },
            Algorithm::NullSha256 => EspLayout { iv_len: 0, icv_len: 16, align: 4 },
            Algorithm::AesGcm128 | Algorithm::AesGcm256 | Algorithm::Chacha20Poly1305 => EspLayout { iv_len: 8, icv_len: 16, align: 4 },
            Algorithm::AesCbcSha256 => EspLayout { iv_len: 16, icv_len: 16, align: 16 },
        }
    }
}

impl std::str::FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Algorithm::ALL.into_iter().find(|a| a.name() == s).ok_or_else(|| {
            let names: Vec<_> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            format!("{s:?}: expected one of {}", names.join(", "))
        })
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an SA's keys were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("encryption key of {got} bytes: expected {} bytes for {alg} (AEADs: the key and a 4-byte salt)", byte_counts(.expected))]
    EncKeyLen { alg: Algorithm, got: usize, expected: &'static [usize] },
    #[error("integrity key of {got} bytes: expected {expected} bytes for {alg}")]
    IntegKeyLen { alg: Algorithm, got: usize, expected: usize },
}

/// `20`, `16 or 32`, `16, 24 or 32`.
fn byte_counts(n: &[usize]) -> String {
    let words: Vec<String> = n.iter().map(usize::to_string).collect();
    match words.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "none".into(),
    }
}

/// Why a packet did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// The ICV (AEAD tag or HMAC) did not verify.
    BadIcv,
    /// The ciphertext is not whole blocks (checked earlier by the layout; kept typed).
    Unaligned,
}

enum Cbc {
    Aes128(aes::Aes128),
    Aes256(aes::Aes256),
}

enum Cipher {
    Null,
    Aead {
        key: aead::LessSafeKey,
        salt: [u8; 4],
    },
    #[cfg(vecgate_ipsec_mb)]
    ImbGcm {
        key: crate::ipsec_mb::GcmKey,
        salt: [u8; 4],
    },
    Cbc {
        data: Cbc,
        iv_key: aes::Aes128,
    },
}

/// An SA's expanded keys.
pub struct Transform {
    alg: Algorithm,
    cipher: Cipher,
    hmac: Option<hmac::Key>,
}

impl std::fmt::Debug for Transform {
    /// Keys never appear in debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("Transform").field("alg", &self.alg).finish_non_exhaustive()
    }
}

/// The AES-GCM implementation SAs use in this process: "intel-ipsec-mb <version>
/// (<the code it picked>)" or "ring".
pub fn aes_gcm_backend() -> &'static str {
    #[cfg(vecgate_ipsec_mb)]
    if let Some(name) = crate::ipsec_mb::backend_name() {
        return name;
    }
    "ring"
}

/// Which AES-GCM implementation a [`Transform`] is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GcmBackend {
    /// intel-ipsec-mb where usable, else ring.
    Fastest,
    /// ring: the tests' reference (a build without the library has none to compare).
    #[cfg_attr(not(all(test, vecgate_ipsec_mb)), allow(dead_code))]
    Ring,
}

/// The ICV computed for HMAC-SHA-256-128: the first 16 bytes of the HMAC (RFC 4868).
const HMAC_ICV_LEN: usize = 16;

impl Transform {
    /// Expand an SA's keys. `iv_seed` keys the CBC IV generator (16 random bytes from the
    /// caller, once per SA; unused by the other algorithms).
    pub fn new(alg: Algorithm, enc_key: &[u8], integ_key: &[u8], iv_seed: [u8; 16]) -> Result<Transform, KeyError> {
        Transform::with_gcm_backend(alg, enc_key, integ_key, iv_seed, GcmBackend::Fastest)
    }

    pub(crate) fn with_gcm_backend(
        alg: Algorithm,
        enc_key: &[u8],
        integ_key: &[u8],
        iv_seed: [u8; 16],
        gcm: GcmBackend,
    ) -> Result<Transform, KeyError> {
        if !alg.enc_key_lens().contains(&enc_key.len()) {
            return Err(KeyError::EncKeyLen { alg, got: enc_key.len(), expected: alg.enc_key_lens() });
        }
        if integ_key.len() != alg.integ_key_len() {
            return Err(KeyError::IntegKeyLen { alg, got: integ_key.len(), expected: alg.integ_key_len() });
        }
        let aead = |ring_alg: &'static aead::Algorithm| {
            let (k, salt) = enc_key.split_at(enc_key.len() - 4);
            // The length was checked above, so ring accepts the key.
            let key = aead::LessSafeKey::new(aead::UnboundKey::new(ring_alg, k).expect("key length checked"));
            Cipher::Aead { key, salt: salt.try_into().expect("4-byte salt") }
        };
        let aes_gcm = |ring_alg: &'static aead::Algorithm| {
            #[cfg(vecgate_ipsec_mb)]
            if gcm == GcmBackend::Fastest {
                let (k, salt) = enc_key.split_at(enc_key.len() - 4);
                if let Some(key) = crate::ipsec_mb::GcmKey::new(k) {
                    return Cipher::ImbGcm { key, salt: salt.try_into().expect("4-byte salt") };
                }
            }
            let _ = gcm;
            aead(ring_alg)
        };
        let cipher = match alg {
            Algorithm::Null | Algorithm::NullSha256 => Cipher::Null,
            Algorithm::AesGcm128 => aes_gcm(&aead::AES_128_GCM),
            Algorithm::AesGcm256 => aes_gcm(&aead::AES_256_GCM),
            Algorithm::Chacha20Poly1305 => aead(&aead::CHACHA20_POLY1305),
            Algorithm::AesCbcSha256 => {
                let data = match enc_key.len() {
                    16 => Cbc::Aes128(aes::Aes128::new_from_slice(enc_key).expect("16 bytes")),
                    _ => Cbc::Aes256(aes::Aes256::new_from_slice(enc_key).expect("32 bytes")),
                };
                Cipher::Cbc { data, iv_key: aes::Aes128::new(&iv_seed.into()) }
            }
        };
        let hmac = (alg.integ_key_len() > 0).then(|| hmac::Key::new(hmac::HMAC_SHA256, integ_key));
        Ok(Transform { alg, cipher, hmac })
    }

    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// Seal an ESP packet in place. `esp` runs from the SPI to the end of the ICV: header
    /// and trailer written, the plaintext between IV and ICV; this writes the IV,
    /// encrypts, and writes the ICV. `seq` is the full 64-bit sequence number; `esn`
    /// says whether its high half is authenticated (RFC 4303 §2.2.1).
    ///
    /// The encrypt nodes call [`Transform::seal_with`], with the nonce and AAD written
    /// earlier.
    #[inline]
    pub fn seal(&self, esp: &mut [u8], seq: u64, esn: bool) {
        let mut inputs = AeadInputs::default();
        let spi = esp.first_chunk::<4>().map_or(0, |s| u32::from_be_bytes(*s));
        self.write_seal_inputs(spi, seq, esn, &mut inputs);
        self.seal_with(esp, seq, esn, &inputs);
    }

    /// What the seal of sequence number `seq` of SA `spi` reads besides the packet (the
    /// AEAD's nonce and AAD, for the cipher that takes them from memory), written into
    /// `out`, to be handed to [`Transform::seal_with`] as late as possible: intel-ipsec-mb
    /// reads them with masked loads, which the store buffer never forwards, so a nonce
    /// written just before the call held the cipher up until the stores reached the
    /// cache (perf: a tenth of the library's samples behind the nonce's load, as many
    /// behind the AAD's, when read from the ESP header written just before;
    /// docs/PERFORMANCE.md).
    #[inline(always)]
    pub fn write_seal_inputs(&self, spi: u32, seq: u64, esn: bool, out: &mut AeadInputs) {
        #[cfg(vecgate_ipsec_mb)]
        if let Cipher::ImbGcm { salt, .. } = &self.cipher {
            // Whole words, each one store: salt and IV (the sequence number; RFC 4106 §4);
            // SPI and the 32-bit sequence number, or SPI and the 64-bit ESN (RFC 4106 §5).
            out.set_nonce(salt, seq.to_be_bytes());
            let (hi, lo) = (((seq >> 32) as u32).to_be() as u64, (seq as u32).to_be() as u64);
            let spi = spi.to_be() as u64;
            out.set_aad(if esn { [spi | hi << 32, lo] } else { [spi | lo << 32, 0] });
        }
        let _ = (spi, seq, esn, out);
    }

    /// Whether [`Transform::open_with`] reads a nonce that [`Transform::write_open_nonce`]
    /// writes (AES-GCM from intel-ipsec-mb); with other ciphers that writes nothing.
    #[inline(always)]
    pub fn opens_with_nonce(&self) -> bool {
        #[cfg(vecgate_ipsec_mb)]
        if matches!(self.cipher, Cipher::ImbGcm { .. }) {
            return true;
        }
        false
    }

    /// The nonce of an ESP packet's opening (the SA's salt and the packet's IV, `esp`
    /// from the SPI on, its layout checked), written into `out` for
    /// [`Transform::open_with`] as soon as the SA is known, for the reason
    /// [`Transform::write_seal_inputs`] gives.
    #[inline(always)]
    pub fn write_open_nonce(&self, esp: &[u8], out: &mut AeadInputs) {
        #[cfg(vecgate_ipsec_mb)]
        if let (Cipher::ImbGcm { salt, .. }, Some(iv)) = (&self.cipher, esp.get(HEADER_LEN..HEADER_LEN + 8)) {
            out.set_nonce(salt, iv.try_into().expect("8 bytes"));
        }
        let _ = (esp, out);
    }

    /// [`Transform::open`] with the nonce [`Transform::write_open_nonce`] wrote for this
    /// packet. The AAD is the ESP header where it lies (not copied), or with the ESN's
    /// high half as `open` builds it.
    #[inline(always)]
    pub fn open_with(&self, esp: &mut [u8], seq: u64, esn: bool, inputs: &AeadInputs) -> Result<(), OpenError> {
        match &self.cipher {
            #[cfg(vecgate_ipsec_mb)]
            Cipher::ImbGcm { key, .. } if self.hmac.is_none() => {
                let (head, rest) = esp.split_at_mut(HEADER_LEN + 8);
                let text_len = rest.len().checked_sub(crate::ipsec_mb::TAG_LEN).ok_or(OpenError::BadIcv)?;
                let (text, icv) = rest.split_at_mut(text_len);
                let with_esn;
                let aad: &[u8] = if esn {
                    with_esn = aead_aad(head, seq, true);
                    &with_esn.0[..with_esn.1]
                } else {
                    &head[..HEADER_LEN]
                };
                key.open_words(&inputs.nonce, aad, text, icv).map_err(|_| OpenError::BadIcv)
            }
            _ => self.open(esp, seq, esn),
        }
    }

    /// Seal an ESP packet in place as [`Transform::seal`] does, with the nonce and AAD
    /// that [`Transform::write_seal_inputs`] wrote for `seq`. Inlined into the encrypt
    /// nodes for the two cases their benchmarks measure, NULL without integrity (nothing
    /// to do: no IV, no ICV) and AES-GCM from intel-ipsec-mb (the library called straight
    /// from the node); the others go through one call.
    #[inline(always)]
    pub fn seal_with(&self, esp: &mut [u8], seq: u64, esn: bool, inputs: &AeadInputs) {
        let _ = inputs;
        match &self.cipher {
            Cipher::Null if self.hmac.is_none() => {}
            #[cfg(vecgate_ipsec_mb)]
            Cipher::ImbGcm { key, .. } => seal_imb_gcm(key, inputs, esp, seq, esn),
            _ => self.seal_other(esp, seq, esn),
        }
    }

    /// [`Transform::seal`] for every cipher (the tests call it for the inlined ones too).
    #[inline(never)]
    fn seal_other(&self, esp: &mut [u8], seq: u64, esn: bool) {
        let l = self.alg.layout();
        let (head, rest) = esp.split_at_mut(HEADER_LEN + l.iv_len);
        let text_len = rest.len() - l.icv_len;
        let (text, icv) = rest.split_at_mut(text_len);
        match &self.cipher {
            Cipher::Null => {}
            Cipher::Aead { key, salt } => {
                head[HEADER_LEN..].copy_from_slice(&seq.to_be_bytes());
                let (aad, aad_len) = aead_aad(head, seq, esn);
                let tag = key
                    .seal_in_place_separate_tag(nonce(salt, seq), aead::Aad::from(&aad[..aad_len]), text)
                    .expect("ESP packets are far below the AEAD's length limit");
                icv.copy_from_slice(tag.as_ref());
                return;
            }
            #[cfg(vecgate_ipsec_mb)]
            Cipher::ImbGcm { key, salt } => {
                head[HEADER_LEN..].copy_from_slice(&seq.to_be_bytes());
                let (aad, aad_len) = aead_aad(head, seq, esn);
                let tag = key.seal_in_place(&nonce_bytes(salt, seq), &aad[..aad_len], text);
                icv.copy_from_slice(&tag);
                return;
            }
            Cipher::Cbc { data, iv_key } => {
                let mut iv = aes::Block::default();
                iv[..8].copy_from_slice(&seq.to_be_bytes());
                iv_key.encrypt_block(&mut iv);
                head[HEADER_LEN..].copy_from_slice(&iv);
                cbc_encrypt(data, &iv, text);
            }
        }
        if let Some(k) = &self.hmac {
            let tag = hmac_icv(k, head, text, seq, esn);
            icv.copy_from_slice(&tag.as_ref()[..HMAC_ICV_LEN]);
        }
    }

    /// Verify and decrypt an ESP packet in place (`esp` from the SPI to the end of the
    /// ICV, its layout checked). On success the plaintext (payload, padding, trailer)
    /// is where the ciphertext was.
    #[inline]
    pub fn open(&self, esp: &mut [u8], seq: u64, esn: bool) -> Result<(), OpenError> {
        let l = self.alg.layout();
        let (head, rest) = esp.split_at_mut(HEADER_LEN + l.iv_len);
        let text_len = rest.len() - l.icv_len;
        if let Some(k) = &self.hmac {
            // Integrity first (encrypt-then-MAC): nothing is decrypted before it holds.
            let (text, icv) = rest.split_at(text_len);
            let tag = hmac_icv(k, head, text, seq, esn);
            if !same_bytes(&tag.as_ref()[..HMAC_ICV_LEN], icv) {
                return Err(OpenError::BadIcv);
            }
        }
        match &self.cipher {
            Cipher::Null => Ok(()),
            Cipher::Aead { key, salt } => {
                let iv: [u8; 8] = head[HEADER_LEN..].try_into().expect("8-byte IV");
                let (aad, aad_len) = aead_aad(head, seq, esn);
                key.open_in_place(nonce(salt, u64::from_be_bytes(iv)), aead::Aad::from(&aad[..aad_len]), rest)
                    .map(|_| ())
                    .map_err(|_| OpenError::BadIcv)
            }
            #[cfg(vecgate_ipsec_mb)]
            Cipher::ImbGcm { key, salt } => {
                let iv: [u8; 8] = head[HEADER_LEN..].try_into().expect("8-byte IV");
                let (aad, aad_len) = aead_aad(head, seq, esn);
                let (text, icv) = rest.split_at_mut(text_len);
                key.open_in_place(&nonce_bytes(salt, u64::from_be_bytes(iv)), &aad[..aad_len], text, icv).map_err(|_| OpenError::BadIcv)
            }
            Cipher::Cbc { data, .. } => {
                let iv = aes::Block::clone_from_slice(&head[HEADER_LEN..]);
                cbc_decrypt(data, &iv, &mut rest[..text_len])
            }
        }
    }
}

/// The AEAD nonce and AAD of one seal, as [`Transform::write_seal_inputs`] writes them:
/// native-endian words holding the wire's bytes in order.
#[derive(Debug, Default, Clone, Copy)]
pub struct AeadInputs {
    /// Salt and IV: 12 bytes.
    nonce: [u64; 2],
    /// SPI and sequence number: 8 bytes, or 12 with the ESN.
    aad: [u8; 16],
}

impl AeadInputs {
    /// The nonce of `salt` and the 8-byte IV `iv` (RFC 4106 §4): two words, each one store.
    #[inline(always)]
    fn set_nonce(&mut self, salt: &[u8; 4], iv: [u8; 8]) {
        let [a, b, c, d, e, f, g, h] = iv;
        self.nonce =
            [u32::from_ne_bytes(*salt) as u64 | (u32::from_ne_bytes([a, b, c, d]) as u64) << 32, u32::from_ne_bytes([e, f, g, h]) as u64];
    }

    /// The AAD from two words, each one store.
    #[inline(always)]
    fn set_aad(&mut self, words: [u64; 2]) {
        self.aad[..8].copy_from_slice(&words[0].to_ne_bytes());
        self.aad[8..].copy_from_slice(&words[1].to_ne_bytes());
    }
}

/// AES-GCM's seal by intel-ipsec-mb, written for its one layout (8-byte IV, 16-byte
/// ICV): the IV (the sequence number) written into the packet, nonce and AAD read from
/// `inputs` ([`Transform::write_seal_inputs`]), and the library's tag written straight
/// into the ICV.
#[cfg(vecgate_ipsec_mb)]
#[inline(always)]
fn seal_imb_gcm(key: &crate::ipsec_mb::GcmKey, inputs: &AeadInputs, esp: &mut [u8], seq: u64, esn: bool) {
    const IV_AT: usize = HEADER_LEN;
    const TEXT_AT: usize = HEADER_LEN + 8;
    let (head, rest) = esp.split_at_mut(TEXT_AT);
    let (text, icv) = rest.split_at_mut(rest.len() - crate::ipsec_mb::TAG_LEN);
    let icv: &mut [u8; crate::ipsec_mb::TAG_LEN] = icv.try_into().expect("split at the tag's length");
    head[IV_AT..].copy_from_slice(&seq.to_be_bytes());
    key.seal_words(&inputs.nonce, &inputs.aad[..if esn { 12 } else { 8 }], text, icv);
}

/// The AEAD nonce: the SA's salt and the 8-byte IV (RFC 4106 §4, RFC 7634 §2).
#[inline(always)]
fn nonce_bytes(salt: &[u8; 4], iv: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(salt);
    n[4..].copy_from_slice(&iv.to_be_bytes());
    n
}

#[inline(always)]
fn nonce(salt: &[u8; 4], iv: u64) -> aead::Nonce {
    aead::Nonce::assume_unique_for_key(nonce_bytes(salt, iv))
}

/// The AEAD's additional data: SPI and the 32-bit sequence number, or SPI and the
/// 64-bit ESN (RFC 4106 §5).
#[inline(always)]
fn aead_aad(head: &[u8], seq: u64, esn: bool) -> ([u8; 12], usize) {
    let mut a = [0u8; 12];
    a[..4].copy_from_slice(&head[..4]);
    if esn {
        a[4..].copy_from_slice(&seq.to_be_bytes());
        (a, 12)
    } else {
        a[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        (a, 8)
    }
}

/// HMAC over header, IV and ciphertext, then the ESN's high half when in use (RFC 4303
/// §3.3.2.1: authenticated, not sent).
#[inline(always)]
fn hmac_icv(k: &hmac::Key, head: &[u8], text: &[u8], seq: u64, esn: bool) -> hmac::Tag {
    let mut cx = hmac::Context::with_key(k);
    cx.update(head);
    cx.update(text);
    if esn {
        cx.update(&((seq >> 32) as u32).to_be_bytes());
    }
    cx.sign()
}

/// Compare ICVs in time independent of where they differ: every byte's difference ORed
/// together, with no branch on the data, then one comparison behind `subtle`'s barrier,
/// which keeps the optimiser from turning it into an early exit. (`subtle`'s slice
/// comparison puts its barrier, an out-of-line volatile store and load, behind every
/// byte: 16 calls for an ICV, ~24 cycles of `esp4-decrypt`'s; docs/PERFORMANCE.md.)
#[inline(always)]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    if a.len() != b.len() {
        return false;
    }
    let ((aw, ar), (bw, br)) = (a.as_chunks::<8>(), b.as_chunks::<8>());
    let words = aw.iter().zip(bw).fold(0u64, |d, (x, y)| d | (u64::from_ne_bytes(*x) ^ u64::from_ne_bytes(*y)));
    let tail = ar.iter().zip(br).fold(0u8, |d, (x, y)| d | (x ^ y));
    bool::from((words | tail as u64).ct_eq(&0))
}

fn cbc_encrypt(c: &Cbc, iv: &aes::Block, text: &mut [u8]) {
    use aes::cipher::{block_padding::NoPadding, BlockEncryptMut};
    let n = text.len();
    // The layout made the text whole blocks; NoPadding only checks that.
    let r = match c {
        Cbc::Aes128(k) => cbc::Encryptor::<aes::Aes128>::inner_iv_init(k.clone(), iv).encrypt_padded_mut::<NoPadding>(text, n).map(|_| ()),
        Cbc::Aes256(k) => cbc::Encryptor::<aes::Aes256>::inner_iv_init(k.clone(), iv).encrypt_padded_mut::<NoPadding>(text, n).map(|_| ()),
    };
    debug_assert!(r.is_ok(), "CBC text is whole blocks");
}

fn cbc_decrypt(c: &Cbc, iv: &aes::Block, text: &mut [u8]) -> Result<(), OpenError> {
    use aes::cipher::{block_padding::NoPadding, BlockDecryptMut};
    if text.len() % aes::Aes128::block_size() != 0 {
        return Err(OpenError::Unaligned);
    }
    let r = match c {
        Cbc::Aes128(k) => cbc::Decryptor::<aes::Aes128>::inner_iv_init(k.clone(), iv).decrypt_padded_mut::<NoPadding>(text).map(|_| ()),
        Cbc::Aes256(k) => cbc::Decryptor::<aes::Aes256>::inner_iv_init(k.clone(), iv).decrypt_padded_mut::<NoPadding>(text).map(|_| ()),
    };
    r.map_err(|_| OpenError::Unaligned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use wire::esp::{EspRepr, EspTrailer};

    fn keys(alg: Algorithm) -> (Vec<u8>, Vec<u8>) {
        let enc = (0..alg.enc_key_lens()[0] as u8).map(|i| i.wrapping_mul(7).wrapping_add(1)).collect();
        let integ = (0..alg.integ_key_len() as u8).map(|i| i ^ 0x5a).collect();
        (enc, integ)
    }

    /// An ESP packet around `payload`, sealed: what an encrypt node builds.
    fn sealed(t: &Transform, spi: u32, seq: u64, esn: bool, payload: &[u8]) -> Vec<u8> {
        let l = t.algorithm().layout();
        let pad = l.pad_len(payload.len());
        let mut b = vec![0u8; payload.len() + l.overhead(payload.len())];
        EspRepr { spi, seq: seq as u32 }.emit(&mut b);
        let at = HEADER_LEN + l.iv_len;
        b[at..at + payload.len()].copy_from_slice(payload);
        let tr = EspTrailer { pad_len: pad as u8, next_header: wire::IpProtocol::IpIp };
        tr.emit(&mut b[at + payload.len()..at + payload.len() + tr.buffer_len()]);
        t.seal(&mut b, seq, esn);
        b
    }

    #[test]
    fn wrong_key_lengths_refused_by_name() {
        assert_eq!(
            Transform::new(Algorithm::AesGcm128, &[0; 16], &[], [0; 16]).unwrap_err(),
            KeyError::EncKeyLen { alg: Algorithm::AesGcm128, got: 16, expected: &[20] }
        );
        assert!(matches!(Transform::new(Algorithm::AesCbcSha256, &[0; 16], &[0; 20], [0; 16]), Err(KeyError::IntegKeyLen { .. })));
        assert!(Transform::new(Algorithm::AesCbcSha256, &[0; 32], &[0; 32], [0; 16]).is_ok());
    }

    #[test]
    fn same_bytes_tells_a_difference_in_any_byte_word_or_tail() {
        for len in [0usize, 1, 7, 8, 12, 16, 20, 32] {
            let a: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
            assert!(same_bytes(&a, &a.clone()), "{len} bytes");
            for at in 0..len {
                for bit in 0..8 {
                    let mut b = a.clone();
                    b[at] ^= 1 << bit;
                    assert!(!same_bytes(&a, &b), "{len} bytes, byte {at} bit {bit}");
                }
            }
            if len > 0 {
                assert!(!same_bytes(&a, &a[..len - 1]), "{len} bytes against one fewer");
            }
        }
    }

    #[test]
    fn names_parse_back() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
        }
        assert!("aes-ccm".parse::<Algorithm>().unwrap_err().contains("aes-gcm-128"));
        for a in Algorithm::ALL {
            // Config and API (serde) use the same names as the CLI and bench.
            assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{}\"", a.name()));
        }
    }

    /// The GCM specification's test case 4 (AES-128, 60-byte text, 20-byte AAD).
    struct GcmCase {
        key: Vec<u8>,
        iv: Vec<u8>,
        pt: Vec<u8>,
        ct: Vec<u8>,
        tag: Vec<u8>,
        aad: Vec<u8>,
    }

    fn gcm_test_case_4() -> GcmCase {
        let hex = |s: &str| (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect::<Vec<u8>>();
        GcmCase {
            key: hex("feffe9928665731c6d6a8f9467308308"),
            iv: hex("cafebabefacedbaddecaf888"),
            pt: hex(
                "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
            ),
            ct: hex(
                "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
            ),
            tag: hex("5bc94fbc3221a5db94fae95ae7121a47"),
            aad: hex("feedfacedeadbeeffeedfacedeadbeefabaddad2"),
        }
    }

    /// RFC 4106 has no test vectors of its own; this is the McGrew-Viega GCM test case 4
    /// (the one RFC 4106 implementations check against), arranged as ESP would: the key,
    /// salt = the first 4 bytes of its IV, and our IV = the other 8 as the sequence number.
    #[test]
    fn aes_gcm_matches_the_gcm_spec_test_case_4() {
        let GcmCase { key, iv, pt, ct, tag, aad } = gcm_test_case_4();
        // Through ring directly (our nonce and AAD come next): the vector holds.
        let k = aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &key).unwrap());
        let mut b = pt.clone();
        let t = k.seal_in_place_separate_tag(aead::Nonce::try_assume_unique_for_key(&iv).unwrap(), aead::Aad::from(&aad), &mut b).unwrap();
        assert_eq!((b, t.as_ref().to_vec()), (ct.clone(), tag));
        // Our nonce: salt then the sequence number as IV.
        let n = nonce(&iv[..4].try_into().unwrap(), u64::from_be_bytes(iv[4..].try_into().unwrap()));
        let mut b = pt.clone();
        let _ = k.seal_in_place_separate_tag(n, aead::Aad::from(&aad), &mut b).unwrap();
        assert_eq!(b, ct);
    }

    #[test]
    fn aad_is_spi_and_sequence_number() {
        let head = [1, 2, 3, 4, 0, 0, 0, 9];
        let (a, n) = aead_aad(&head, 0x0000_0007_0000_0009, false);
        assert_eq!(&a[..n], &[1, 2, 3, 4, 0, 0, 0, 9]);
        let (a, n) = aead_aad(&head, 0x0000_0007_0000_0009, true);
        assert_eq!(&a[..n], &[1, 2, 3, 4, 0, 0, 0, 7, 0, 0, 0, 9]);
    }

    #[test]
    fn null_leaves_the_payload_in_clear() {
        let (e, i) = keys(Algorithm::Null);
        let t = Transform::new(Algorithm::Null, &e, &i, [0; 16]).unwrap();
        let b = sealed(&t, 0x1000, 1, false, b"hello");
        assert_eq!(&b[8..13], b"hello");
        assert_eq!(b.len(), 8 + 5 + 1 + 2, "one byte of padding to a multiple of 4");
    }

    /// The AES-GCM Transform uses intel-ipsec-mb wherever the library loaded.
    #[cfg(vecgate_ipsec_mb)]
    #[test]
    fn aes_gcm_uses_ipsec_mb_when_it_loaded() {
        for alg in [Algorithm::AesGcm128, Algorithm::AesGcm256] {
            let (e, i) = keys(alg);
            let t = Transform::new(alg, &e, &i, [0; 16]).unwrap();
            let mb = crate::ipsec_mb::backend_name().is_some();
            // Built with it on a CPU with AES-NI, only the environment may turn it off:
            // the other tests of the library must not pass because it failed to load.
            let chosen_off = std::env::var("VECGATE_AES_GCM").is_ok_and(|v| v == "ring");
            assert_eq!(mb, std::arch::is_x86_feature_detected!("aes") && !chosen_off, "intel-ipsec-mb loaded");
            assert_eq!(matches!(t.cipher, Cipher::ImbGcm { .. }), mb, "{alg}");
            assert_eq!(aes_gcm_backend().starts_with("intel-ipsec-mb"), mb);
            let r = Transform::with_gcm_backend(alg, &e, &i, [0; 16], GcmBackend::Ring).unwrap();
            assert!(matches!(r.cipher, Cipher::Aead { .. }));
        }
    }

    /// The GCM spec's test case 4 (as above) through intel-ipsec-mb, and its open.
    #[cfg(vecgate_ipsec_mb)]
    #[test]
    fn ipsec_mb_matches_the_gcm_spec_test_case_4() {
        use crate::ipsec_mb::{BadTag, GcmKey};
        let GcmCase { key, iv, pt, ct, tag, aad } = gcm_test_case_4();
        let Some(k) = GcmKey::new(&key) else { return };
        let iv: [u8; 12] = iv.try_into().unwrap();
        let mut b = pt.clone();
        let t = k.seal_in_place(&iv, &aad, &mut b);
        assert_eq!((b.clone(), t.to_vec()), (ct, tag.clone()));
        assert_eq!(k.open_in_place(&iv, &aad, &mut b, &tag), Ok(()));
        assert_eq!(b, pt);
        let mut bad_tag = tag.clone();
        bad_tag[15] ^= 0x80;
        let mut b = t.to_vec(); // any text: the tag decides
        assert_eq!(k.open_in_place(&iv, &aad, &mut b, &bad_tag), Err(BadTag));
        assert!(b.iter().all(|&x| x == 0), "refused text zeroed");
    }

    #[cfg(vecgate_ipsec_mb)]
    proptest! {
        /// intel-ipsec-mb against ring, both ways: the same ciphertext and tag for any key,
        /// nonce, AAD and length; each opens what the other sealed; a flipped bit in the
        /// ciphertext, the AAD or the tag is refused.
        #[test]
        fn ipsec_mb_and_ring_agree_both_ways(
            key in proptest::collection::vec(any::<u8>(), 32), wide: bool,
            iv in any::<[u8; 12]>(),
            aad in proptest::collection::vec(any::<u8>(), 0..=20),
            text in proptest::collection::vec(any::<u8>(), 0..2000),
            target in 0u8..3, flip in any::<proptest::sample::Index>(), bit in 0u8..8,
        ) {
            use crate::ipsec_mb::{BadTag, GcmKey};
            let key = if wide { &key[..] } else { &key[..16] };
            let Some(mb) = GcmKey::new(key) else { return Ok(()) };
            let ring_alg = if wide { &aead::AES_256_GCM } else { &aead::AES_128_GCM };
            let rk = aead::LessSafeKey::new(aead::UnboundKey::new(ring_alg, key).unwrap());
            let n = || aead::Nonce::assume_unique_for_key(iv);

            // ipsec-mb seals, ring opens.
            let mut by_mb = text.clone();
            let tag = mb.seal_in_place(&iv, &aad, &mut by_mb);
            let mut by_ring = text.clone();
            let ring_tag = rk.seal_in_place_separate_tag(n(), aead::Aad::from(&aad), &mut by_ring).unwrap();
            prop_assert_eq!(&by_mb, &by_ring);
            prop_assert_eq!(&tag[..], ring_tag.as_ref());
            let mut joined: Vec<u8> = by_mb.iter().chain(&tag).copied().collect();
            let opened = rk.open_in_place(n(), aead::Aad::from(&aad), &mut joined).unwrap();
            prop_assert_eq!(&opened[..], &text[..]);

            // ring seals, ipsec-mb opens.
            let mut o = by_ring.clone();
            prop_assert_eq!(mb.open_in_place(&iv, &aad, &mut o, ring_tag.as_ref()), Ok(()));
            prop_assert_eq!(&o, &text);

            // One flipped bit anywhere is refused.
            let (mut c, mut a, mut t) = (by_ring.clone(), aad.clone(), tag.to_vec());
            let v = match target {
                0 if !c.is_empty() => &mut c,
                1 if !a.is_empty() => &mut a,
                _ => &mut t,
            };
            let at = flip.index(v.len());
            v[at] ^= 1 << bit;
            prop_assert_eq!(mb.open_in_place(&iv, &a, &mut c, &t), Err(BadTag));
        }

        /// ESP packets sealed by one backend's Transform open with the other's, for both
        /// key sizes, with and without ESN: the nonce and AAD are built the same way.
        #[test]
        fn esp_sealed_by_either_gcm_backend_opens_with_the_other(
            wide: bool, payload in proptest::collection::vec(any::<u8>(), 0..300),
            seq in 1u64..u64::MAX, esn: bool,
        ) {
            let alg = if wide { Algorithm::AesGcm256 } else { Algorithm::AesGcm128 };
            let (e, i) = keys(alg);
            let fast = Transform::new(alg, &e, &i, [0; 16]).unwrap();
            let ring = Transform::with_gcm_backend(alg, &e, &i, [0; 16], GcmBackend::Ring).unwrap();
            let a = sealed(&fast, 0x1234, seq, esn, &payload);
            let b = sealed(&ring, 0x1234, seq, esn, &payload);
            prop_assert_eq!(&a, &b);
            let (mut x, mut y) = (a.clone(), b.clone());
            prop_assert_eq!(ring.open(&mut x, seq, esn), Ok(()));
            prop_assert_eq!(fast.open(&mut y, seq, esn), Ok(()));
            prop_assert_eq!(&x, &y);
        }
    }

    proptest! {
        /// The paths `seal` inlines (NULL, AES-GCM from intel-ipsec-mb: IV, nonce and AAD
        /// from the words `write_seal_inputs` wrote, tag straight into the ICV) write the
        /// same bytes as the general one, for every algorithm, with and without ESN.
        #[test]
        fn inlined_seal_writes_what_the_general_one_does(
            alg in proptest::sample::select(Algorithm::ALL.to_vec()),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            seq in 1u64..u64::MAX, esn: bool,
        ) {
            let (e, i) = keys(alg);
            let t = Transform::new(alg, &e, &i, [5; 16]).unwrap();
            let fast = sealed(&t, 0x4321, seq, esn, &payload);
            let mut general = fast.clone();
            let l = alg.layout();
            // Back to the unsealed packet: the payload and trailer in clear, IV and ICV zero.
            let mut o = fast.clone();
            prop_assert_eq!(t.open(&mut o, seq, esn), Ok(()));
            general[HEADER_LEN..HEADER_LEN + l.iv_len].fill(0);
            let text_end = general.len() - l.icv_len;
            general[HEADER_LEN + l.iv_len..text_end].copy_from_slice(&o[HEADER_LEN + l.iv_len..text_end]);
            general[text_end..].fill(0);
            t.seal_other(&mut general, seq, esn);
            prop_assert_eq!(&fast, &general);
        }

        /// The decrypt node's opening (`write_open_nonce` when the SA is known, then
        /// `open_with`: the nonce from the words written, the AAD from the header in
        /// place or with the ESN's high half) answers as `open` does, for every
        /// algorithm, with and without ESN, a packet as sealed or with one bit flipped
        /// (header, IV, text or ICV; the sequence number the node's, from the header),
        /// and leaves the same bytes.
        #[test]
        fn the_nodes_opening_answers_as_open_does(
            alg in proptest::sample::select(Algorithm::ALL.to_vec()),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            seq in 1u64..u64::MAX, esn: bool, flip in proptest::option::of(any::<proptest::sample::Index>()), bit in 0u8..8,
        ) {
            let (e, i) = keys(alg);
            let t = Transform::new(alg, &e, &i, [7; 16]).unwrap();
            let mut a = sealed(&t, 0x5678, seq, esn, &payload);
            if let Some(f) = flip {
                let at = f.index(a.len());
                a[at] ^= 1 << bit;
            }
            // The node's `seq`: from the header's field (its low half with the ESN).
            let low = u32::from_be_bytes([a[4], a[5], a[6], a[7]]) as u64;
            let seq = if esn { seq & !0xffff_ffff | low } else { low };
            let mut b = a.clone();
            let mut inputs = AeadInputs::default();
            t.write_open_nonce(&b, &mut inputs);
            let fast = t.open_with(&mut b, seq, esn, &mut inputs);
            prop_assert_eq!(fast, t.open(&mut a, seq, esn));
            prop_assert_eq!(&a, &b);
        }

        #[test]
        fn every_algorithm_opens_what_it_sealed_and_refuses_any_flipped_bit(
            alg in proptest::sample::select(Algorithm::ALL.to_vec()),
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            seq in 1u64..u64::MAX, esn: bool, flip in any::<proptest::sample::Index>(), bit in 0u8..8,
        ) {
            let (e, i) = keys(alg);
            let t = Transform::new(alg, &e, &i, [3; 16]).unwrap();
            let b = sealed(&t, 0x1234, seq, esn, &payload);
            let l = alg.layout();
            if alg != Algorithm::Null && alg != Algorithm::NullSha256 && payload.len() >= 8 {
                prop_assert_ne!(&b[8 + l.iv_len..8 + l.iv_len + payload.len()], &payload[..], "encrypted");
            }
            let mut o = b.clone();
            prop_assert_eq!(t.open(&mut o, seq, esn), Ok(()));
            let text = &o[8 + l.iv_len..o.len() - l.icv_len];
            let tr = EspTrailer::parse(text).unwrap();
            prop_assert_eq!(&text[..tr.payload_len(text.len())], &payload[..]);
            if alg != Algorithm::Null {
                let mut bad = b.clone();
                let at = flip.index(bad.len());
                bad[at] ^= 1 << bit;
                // The receiver reads the low half of the number from the packet.
                let low = u32::from_be_bytes(bad[4..8].try_into().unwrap()) as u64;
                prop_assert_eq!(t.open(&mut bad, (seq & !0xffff_ffff) | low, esn), Err(OpenError::BadIcv));
                if esn {
                    // The ESN's high half is authenticated though not sent.
                    let mut o = b.clone();
                    prop_assert_eq!(t.open(&mut o, seq ^ (1 << 40), esn), Err(OpenError::BadIcv));
                }
            }
        }
    }
}
