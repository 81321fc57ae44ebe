//! FIB lookups: one-at-a-time vs the batched level-by-level walk, on a small table and on
//! a million BGP-like prefixes with 64k destinations. `cargo bench -p vecgate-ip`.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ip::lpm::{LpmKey, Poptrie, Route};
use std::collections::BTreeMap;

mod common;
use common::Rng;

fn table<K: LpmKey>(n: usize, rng: &mut Rng, mix: &[u8], key: impl Fn(&mut Rng) -> K) -> (Poptrie<K>, Vec<Route<K>>) {
    let mut m = BTreeMap::new();
    while m.len() < n {
        let len = mix[(rng.next() % mix.len() as u64) as usize];
        let k = key(rng).masked(len);
        m.insert((k, len), 1 + (m.len() as u32 % 4));
    }
    let routes: Vec<Route<K>> = m.into_iter().map(|((k, l), v)| (k, l, v)).collect();
    (Poptrie::build(&routes), routes)
}

fn bench_fib(c: &mut Criterion) {
    let mut rng = Rng(42);
    // Mostly /24 (IPv4) and /48 (IPv6), as in real tables.
    let v4_mix = [24, 24, 24, 24, 24, 24, 23, 22, 22, 21, 20, 19, 18, 16];
    let v6_mix = [48, 48, 48, 48, 48, 32, 32, 44, 40, 36, 29, 56, 64];
    let mut g = c.benchmark_group("fib");
    g.sample_size(20);
    for (name, n) in [("small", 16usize), ("1m", 1_000_000)] {
        let (t4, r4) = table::<u32>(n, &mut rng, &v4_mix, |r| (r.next() >> 32) as u32);
        let keys4: Vec<u32> = (0..65_536).map(|_| r4[(rng.next() % r4.len() as u64) as usize].0 | ((rng.next() as u32) & 0xff)).collect();
        let mut out = vec![0u32; 256];
        g.throughput(Throughput::Elements(keys4.len() as u64));
        g.bench_function(format!("ip4-{name}/one-at-a-time"), |b| {
            b.iter(|| keys4.iter().map(|&k| t4.lookup(black_box(k)) as u64).sum::<u64>())
        });
        g.bench_function(format!("ip4-{name}/batched-256"), |b| {
            b.iter(|| {
                let mut s = 0u64;
                for chunk in keys4.chunks(256) {
                    t4.lookup_batch(black_box(chunk), &mut out);
                    s += out[0] as u64;
                }
                s
            })
        });
        let (t6, r6) = table::<u128>(n, &mut rng, &v6_mix, |r| (0x2000u128 << 112) | (((r.next() as u128) << 64 | r.next() as u128) >> 3));
        let keys6: Vec<u128> = (0..65_536).map(|_| r6[(rng.next() % r6.len() as u64) as usize].0 | (rng.next() as u128 & 0xffff)).collect();
        g.bench_function(format!("ip6-{name}/one-at-a-time"), |b| {
            b.iter(|| keys6.iter().map(|&k| t6.lookup(black_box(k)) as u64).sum::<u64>())
        });
        g.bench_function(format!("ip6-{name}/batched-256"), |b| {
            b.iter(|| {
                let mut s = 0u64;
                for chunk in keys6.chunks(256) {
                    t6.lookup_batch(black_box(chunk), &mut out);
                    s += out[0] as u64;
                }
                s
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_fib);
criterion_main!(benches);
