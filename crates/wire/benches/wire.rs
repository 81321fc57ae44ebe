//! Parsers, checksum and pseudo-header costs. `cargo bench -p vecgate-wire`.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use wire::checksum;
use wire::ipv4::{Ipv4Packet, Ipv4Repr};
use wire::ipv6::Ipv6Packet;
use wire::ipv6_ext::walk_chain;
use wire::udp::UdpPacket;
use wire::IpProtocol;

fn bench_checksum(c: &mut Criterion) {
    let mut g = c.benchmark_group("checksum");
    for len in [20usize, 64, 576, 1500, 9000] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("rfc1071/{len}"), |b| b.iter(|| checksum::checksum(black_box(&data))));
    }
    g.bench_function("rfc1624/update16", |b| b.iter(|| checksum::update16(black_box(0x1234), black_box(0x4011), black_box(0x3f11))));
    g.finish();
}

fn bench_parse(c: &mut Criterion) {
    let mut b4 = [0u8; 28];
    Ipv4Repr {
        src: [198, 18, 0, 1].into(),
        dst: [198, 19, 0, 1].into(),
        protocol: IpProtocol::Udp,
        payload_len: 8,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 0,
        dont_frag: false,
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut b4[..]));
    b4[25] = 8;
    let mut g = c.benchmark_group("parse");
    g.bench_function("ipv4/new_checked+verify", |b| {
        b.iter(|| {
            let p = Ipv4Packet::new_checked(black_box(&b4[..])).unwrap();
            p.verify_checksum()
        })
    });
    g.bench_function("ipv4/repr", |b| b.iter(|| Ipv4Repr::parse(&Ipv4Packet::new_checked(black_box(&b4[..])).unwrap())));
    g.bench_function("udp/new_checked", |b| b.iter(|| UdpPacket::new_checked(black_box(&b4[20..])).map(|u| u.dst_port())));
    let mut b6 = vec![0u8; 40 + 16 + 8];
    b6[0] = 0x60;
    b6[5] = 24;
    b6[6] = 0;
    b6[40] = 17;
    b6[42] = 1;
    b6[43] = 4;
    b6[48] = 1;
    g.bench_function("ipv6/chain-hbh-udp", |b| {
        b.iter(|| {
            let p = Ipv6Packet::new_checked(black_box(&b6[..])).unwrap();
            walk_chain(p.next_header(), p.payload())
        })
    });
    g.finish();
}

criterion_group!(benches, bench_checksum, bench_parse);
criterion_main!(benches);
