//! A source checked against a service's ranges (`lb` `source_ranges`): the prefix set
//! against the scan of every range it replaced, at 1 and 500 ranges, IPv4 and IPv6.
//! `cargo bench -p vecgate-ip --bench prefix_set`.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ip::{Prefix, PrefixSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod common;
use common::Rng;

/// The check as it was: each range a (network, mask) pair, scanned in order.
fn scan(ranges: &[(u128, u128)], src: &[u8]) -> bool {
    let a = src.iter().fold(0u128, |x, &b| x << 8 | b as u128);
    ranges.iter().any(|&(net, mask)| a & mask == net)
}

fn pairs(prefixes: &[Prefix]) -> Vec<(u128, u128)> {
    prefixes
        .iter()
        .map(|p| match *p {
            Prefix::V4(a, l) => (u32::from(a) as u128, (u32::MAX.checked_shl(32 - l as u32).unwrap_or(0)) as u128),
            Prefix::V6(a, l) => (u128::from(a), u128::MAX.checked_shl(128 - l as u32).unwrap_or(0)),
        })
        .collect()
}

fn bench_sources(c: &mut Criterion) {
    let mut rng = Rng(7);
    let mut g = c.benchmark_group("source_ranges");
    g.sample_size(20).measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    // Cloud allowlists: mostly /24s to /32s, some /16s to /22s; sources of 1,024
    // connections, a quarter inside a range (the rest refused: the scan's worst case).
    for v6 in [false, true] {
        for n in [1usize, 500] {
            let prefixes: Vec<Prefix> = (0..n)
                .map(|_| {
                    let len = [16u8, 20, 22, 24, 24, 24, 28, 32, 32][(rng.next() % 9) as usize];
                    if v6 {
                        let a = Ipv6Addr::from((rng.next() as u128) << 64 | rng.next() as u128);
                        Prefix::covering(a.into(), len + 32)
                    } else {
                        Prefix::covering(Ipv4Addr::from(rng.next() as u32).into(), len)
                    }
                })
                .collect();
            let sources: Vec<Vec<u8>> = (0..1024)
                .map(|i| {
                    let x = (rng.next() as u128) << 64 | rng.next() as u128;
                    let a: IpAddr = match (i % 4, prefixes[i % n]) {
                        (0, Prefix::V4(p, l)) => {
                            Ipv4Addr::from(u32::from(p) | (x as u32 & !u32::MAX.checked_shl(32 - l as u32).unwrap_or(0))).into()
                        }
                        (0, Prefix::V6(p, l)) => {
                            Ipv6Addr::from(u128::from(p) | (x & !u128::MAX.checked_shl(128 - l as u32).unwrap_or(0))).into()
                        }
                        _ if v6 => Ipv6Addr::from(x).into(),
                        _ => Ipv4Addr::from(x as u32).into(),
                    };
                    match a {
                        IpAddr::V4(a) => a.octets().to_vec(),
                        IpAddr::V6(a) => a.octets().to_vec(),
                    }
                })
                .collect();
            let set = PrefixSet::new(v6, prefixes.iter().copied());
            let linear = pairs(&prefixes);
            for s in &sources {
                assert_eq!(set.contains_bytes(s), scan(&linear, s));
            }
            let fam = if v6 { "v6" } else { "v4" };
            g.throughput(Throughput::Elements(sources.len() as u64));
            g.bench_function(format!("{fam}/{n}/scan"), |b| b.iter(|| sources.iter().filter(|s| scan(black_box(&linear), s)).count()));
            g.bench_function(format!("{fam}/{n}/prefix_set"), |b| {
                b.iter(|| sources.iter().filter(|s| black_box(&set).contains_bytes(s)).count())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_sources);
criterion_main!(benches);
