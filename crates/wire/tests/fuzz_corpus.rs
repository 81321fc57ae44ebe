//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`) through the same target
//! bodies cargo-fuzz runs, on stable Rust, so every seed keeps passing its invariants.

#[test]
fn corpus_replays_cleanly() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut total = 0;
    for (name, target) in wire::fuzz::TARGETS {
        let dir = root.join(name);
        let entries: Vec<_> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).collect();
        assert!(!entries.is_empty(), "no seeds for {name}");
        for e in entries {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            target(&data);
            total += 1;
        }
    }
    assert!(total >= 8);
}

#[test]
fn targets_survive_every_short_input() {
    // Every length up to 64 of a few byte patterns: the truncation edges.
    for (_, target) in wire::fuzz::TARGETS {
        for fill in [0x00u8, 0xff, 0x45, 0x60] {
            for len in 0..64 {
                target(&vec![fill; len]);
            }
        }
    }
}

/// The GTP-U seeds were encoded by scapy (`fuzz/make_corpus.py`); our parser must read
/// back exactly what scapy was asked to encode.
#[test]
fn scapy_encoded_gtpu_parses_to_its_fields() {
    use wire::gtpu::{GtpuPacket, GtpuRepr, MessageType, PduSession, Teid};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/gtpu");
    let read = |n: usize| std::fs::read(dir.join(format!("seed-{n:03}"))).unwrap();
    // Each packet in the script yields 6 files; the first of each is the packet itself.
    let plain = read(0);
    let r = GtpuRepr::parse(&GtpuPacket::new_checked(&plain[..]).unwrap()).unwrap();
    assert_eq!((r.msg_type, r.teid, r.pdu_session), (MessageType::GPdu, Teid(0x1234), None));
    assert_eq!(r.payload_len, 28);
    let ul = read(6);
    let r = GtpuRepr::parse(&GtpuPacket::new_checked(&ul[..]).unwrap()).unwrap();
    assert_eq!(r.teid, Teid(7));
    assert!(matches!(r.pdu_session, Some(PduSession::Uplink { qfi }) if qfi.get() == 9), "{r:?}");
    let dl = read(12);
    let r = GtpuRepr::parse(&GtpuPacket::new_checked(&dl[..]).unwrap()).unwrap();
    assert!(matches!(r.pdu_session, Some(PduSession::Downlink { qfi, rqi: true, ppi: None }) if qfi.get() == 5), "{r:?}");
    assert_eq!(r.payload_len, 48);
    let echo = read(18);
    let r = GtpuRepr::parse(&GtpuPacket::new_checked(&echo[..]).unwrap()).unwrap();
    assert_eq!((r.msg_type, r.seq), (MessageType::EchoRequest, Some(5)));
}

/// The parcel seeds were built by `tests/parcelpkt.py` (`fuzz/make_parcel_corpus.py`),
/// byte by byte from the format description: ours must read them as that script meant.
#[test]
fn python_built_parcels_parse_to_their_fields() {
    use wire::parcel::{Parcel4, Parcel6, ParcelError, UdpChecksumForm};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/parcel");
    let read = |n: usize| std::fs::read(dir.join(format!("seed-{n:03}"))).unwrap();
    let all_good = |p: &Parcel4<&[u8]>| (0..p.segment_count()).all(|i| p.verify_segment(i));
    let b = read(0);
    let p = Parcel4::new_checked(&b[..]).unwrap();
    assert_eq!((p.segment_count(), p.segment_len(), p.last_segment_len(), p.src_port()), (4, 40, 40, 45080));
    assert_eq!(p.verify_udp_checksum(), Some(UdpChecksumForm::Prototype));
    assert!(all_good(&p));
    assert_eq!(p.segment(3), &[3u8; 40][..]);
    let b = read(1);
    let p = Parcel4::new_checked(&b[..]).unwrap();
    assert_eq!((p.segment_count(), p.last_segment_len()), (4, 13));
    assert!(all_good(&p));
    let b = read(2);
    assert_eq!(Parcel4::new_checked(&b[..]).unwrap().verify_udp_checksum(), Some(UdpChecksumForm::Plain));
    let err = |n| Parcel4::new_checked(&read(n)[..]).unwrap_err();
    assert_eq!(err(3), ParcelError::NoSegments);
    assert_eq!(err(4), ParcelError::IntegrityTruncated);
    assert_eq!(err(5), ParcelError::BadUdpLength);
    assert_eq!(err(6), ParcelError::ShortNonFinalSegment);
    assert_eq!(err(9), ParcelError::SegmentTruncated);
    for n in [7, 8] {
        let b = read(n);
        let p = Parcel6::new_checked(&b[..]).unwrap();
        assert_eq!(p.verify_udp_checksum(), Some(UdpChecksumForm::Plain), "seed {n}");
        assert!((0..p.segment_count()).all(|i| p.verify_segment(i)));
        assert_eq!(p.segment_count(), if n == 7 { 4 } else { 3 });
    }
}

/// The ESP seeds were encrypted by scapy's ESP layer (`fuzz/make_corpus.py`): our views
/// read its header, and its NULL-encrypted trailer (padding 1, 2, ...; next header 4).
#[test]
fn scapy_encoded_esp_parses_to_its_fields() {
    use wire::esp::{classify_udp, EspLayout, EspPacket, EspTrailer, UdpEncap};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/esp");
    let read = |n: usize| std::fs::read(dir.join(format!("seed-{n:03}"))).unwrap();
    let null = read(0);
    let p = EspPacket::new_checked(&null[..]).unwrap();
    assert_eq!((p.spi(), p.seq()), (0x1000, 1));
    let l = EspLayout { iv_len: 0, icv_len: 0, align: 4 };
    p.check_layout(&l).unwrap();
    let t = EspTrailer::parse(p.ciphertext(&l)).unwrap();
    assert_eq!(t.next_header, wire::IpProtocol::IpIp);
    assert_eq!(t.payload_len(p.ciphertext(&l).len()), 28, "the inner IPv4 ICMP echo");
    let gcm = read(6);
    let p = EspPacket::new_checked(&gcm[..]).unwrap();
    assert_eq!((p.spi(), p.seq()), (0x2000, 5));
    assert_eq!(p.check_layout(&EspLayout { iv_len: 8, icv_len: 16, align: 4 }), Ok(()));
    let cbc = read(12);
    assert_eq!(EspPacket::new_checked(&cbc[..]).unwrap().check_layout(&EspLayout { iv_len: 16, icv_len: 16, align: 16 }), Ok(()));
    assert_eq!(classify_udp(&read(18)), Ok(UdpEncap::Keepalive));
    assert_eq!(classify_udp(&read(24)), Ok(UdpEncap::Ike));
}
