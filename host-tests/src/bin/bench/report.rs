//! The table on stdout, the JSON file and the SVG chart (written by hand).

use crate::workload::Sample;
use crate::Results;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

pub const WASI: &str = "mongo-wasi";
/// The same component under an async host (contenders.rs, `WasiAsync`).
pub const WASI_ASYNC: &str = "mongo-wasi-async";
/// The floor's round trip from a minimal component under the same host, so
/// mongo-wasi over it is the driver's own cost (contenders.rs, `WasmFloor`).
const WASM_FLOOR: &str = "wasm-floor";
const OTHERS: [&str; 4] = ["mongodb-rust", "pymongo", "floor", WASM_FLOOR];
/// The same under the async host, the measure for `mongo-wasi-async`.
const WASM_FLOOR_ASYNC: &str = "wasm-floor-async";

/// The q-quantile (0..=1) of `v`, by nearest rank.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

#[derive(Clone, Copy)]
struct Stat {
    median_s: f64,
    mbps: f64,
    p50_us: f64,
    p99_us: f64,
    iterations: usize,
}

fn stat(samples: &[Sample], bytes: f64) -> Stat {
    let totals: Vec<f64> = samples.iter().map(|s| s.total_s).collect();
    let ops: Vec<f64> = samples
        .iter()
        .flat_map(|s| s.per_op_us.iter().copied())
        .collect();
    let median_s = quantile(&totals, 0.5);
    Stat {
        median_s,
        mbps: bytes / 1e6 / median_s,
        p50_us: quantile(&ops, 0.5),
        p99_us: quantile(&ops, 0.99),
        iterations: samples.len(),
    }
}

/// `nx`: those runs use their own op counts, so bytes come from the per-op samples.
fn stats(
    set: &BTreeMap<String, BTreeMap<String, Vec<Sample>>>,
    r: &Results,
    nx: bool,
) -> BTreeMap<String, BTreeMap<String, Stat>> {
    set.iter()
        .map(|(w, by)| {
            let bytes = r.bytes_per_iter.get(w).copied().unwrap_or(0.0);
            let bytes = if nx {
                by.values()
                    .next()
                    .and_then(|s| s.first())
                    .map(|s| s.per_op_us.len() as f64)
                    .unwrap_or(0.0)
                    * crate::workload::parse(w)
                        .map(|w| w.unit_bytes())
                        .unwrap_or(0.0)
            } else {
                bytes
            };
            (
                w.clone(),
                by.iter()
                    .map(|(c, s)| (c.clone(), stat(s, bytes)))
                    .collect(),
            )
        })
        .collect()
}

/// mongo-wasi's cost over `other`'s: time over time for latency, the other's
/// MB/s over mongo-wasi's for throughput (below 1.0: mongo-wasi is ahead).
fn ratio(st: &BTreeMap<String, BTreeMap<String, Stat>>, w: &str, other: &str) -> Option<f64> {
    ratio_of(st, WASI, w, other)
}

/// [`ratio`] for the contender `who`.
fn ratio_of(
    st: &BTreeMap<String, BTreeMap<String, Stat>>,
    who: &str,
    w: &str,
    other: &str,
) -> Option<f64> {
    let by = st.get(w)?;
    let (a, b) = (by.get(who)?, by.get(other)?);
    let r = a.median_s / b.median_s; // == b.mbps / a.mbps for the same bytes
    r.is_finite().then_some(r)
}

fn round(x: f64, places: i32) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let m = 10f64.powi(places);
    json!((x * m).round() / m)
}

pub fn json(r: &Results) -> Value {
    let st = stats(&r.work, r, false);
    let nx = stats(&r.nx, r, true);
    let table = |st: &BTreeMap<String, BTreeMap<String, Stat>>| -> Value {
        let mut m = Map::new();
        for (w, by) in st {
            let mut c = Map::new();
            for (name, s) in by {
                let mut o = json!({
                    "median_ms": round(s.median_s * 1e3, 3),
                    "mb_per_s": round(s.mbps, 2),
                    "iterations": s.iterations,
                });
                if s.p50_us.is_finite() {
                    o["op_p50_us"] = round(s.p50_us, 1);
                    o["op_p99_us"] = round(s.p99_us, 1);
                }
                c.insert(name.clone(), o);
            }
            m.insert(w.clone(), Value::Object(c));
        }
        Value::Object(m)
    };
    let cold: BTreeMap<&String, f64> = r.cold.iter().map(|(c, v)| (c, quantile(v, 0.5))).collect();
    let cold_ratio = match (
        cold.get(&WASI.to_string()),
        cold.get(&"mongodb-rust".to_string()),
    ) {
        (Some(a), Some(b)) => round(a / b, 3),
        _ => Value::Null,
    };
    let wasi_over: Vec<f64> = r
        .deadline
        .get(WASI)
        .map(|by| {
            by.iter()
                .flat_map(|(t, v)| v.iter().map(move |ms| ms - *t as f64))
                .collect()
        })
        .unwrap_or_default();
    // The headline ratios, for a contender.
    let headline = |who: &str, wasm_floor: &str| {
        let mut ratios = Map::new();
        let mut put = |k: &str, w: &str, other: &str| {
            let v = ratio_of(&st, who, w, other);
            ratios.insert(k.to_string(), v.map(|x| round(x, 3)).unwrap_or(Value::Null));
        };
        put("find_one_vs_native", "find_one", "mongodb-rust");
        put("find_one_vs_floor", "find_one", "floor");
        put("find_one_vs_wasm_floor", "find_one", wasm_floor);
        put("insert_one_vs_native", "insert_one_small", "mongodb-rust");
        put("find_many_mbps_vs_native", "find_many", "mongodb-rust");
        ratios
    };
    let mut ratios = headline(WASI, WASM_FLOOR);
    ratios.insert("cold_start_vs_native".into(), cold_ratio);
    let conc = concurrent_stats(r);
    if !conc.is_empty() {
        for (k, w) in [
            ("concurrent_find_one_vs_native", "find_one"),
            ("concurrent_insert_one_vs_native", "insert_one_small"),
        ] {
            let v = ratio_of(&conc, crate::concurrent::P3, w, crate::concurrent::NATIVE);
            ratios.insert(k.into(), v.map(|x| round(x, 3)).unwrap_or(Value::Null));
        }
    }
    // Every workload against every other contender, for the chart.
    let mut all = Map::new();
    for (w, by) in &st {
        let mut m = Map::new();
        for o in OTHERS {
            if by.contains_key(o) {
                m.insert(
                    o.into(),
                    ratio(&st, w, o).map(|x| round(x, 3)).unwrap_or(Value::Null),
                );
            }
        }
        if !m.is_empty() {
            all.insert(w.clone(), Value::Object(m));
        }
    }
    let mut deadline = Map::new();
    for (c, by) in &r.deadline {
        let mut m = Map::new();
        for (t, v) in by {
            let over: Vec<f64> = v.iter().map(|ms| ms - *t as f64).collect();
            m.insert(
                t.to_string(),
                json!({
                    "ops": v.len(),
                    "overshoot_ms": {
                        "p50": round(quantile(&over, 0.5), 2),
                        "p99": round(quantile(&over, 0.99), 2),
                        "max": round(quantile(&over, 1.0), 2),
                    }
                }),
            );
        }
        deadline.insert(c.clone(), Value::Object(m));
    }
    let churn_of = |c: &str| {
        r.churn
            .get(c)
            .map(|(ops, n, s)| json!({"ops": ops, "new_connections": n, "seconds": round(*s, 2)}))
    };
    let mut churn = churn_of(WASI).unwrap_or(json!({"ops": 0, "new_connections": null}));
    for c in OTHERS {
        if let Some(v) = churn_of(c) {
            churn[c] = v;
        }
    }
    let cold_phases: Map<_, _> = ["instantiate", "connect", "first_find_one"]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let v: Vec<f64> = r.cold_phases.iter().map(|ph| ph[i] / 1e3).collect();
            (p.to_string(), round(quantile(&v, 0.5), 3))
        })
        .collect();
    json!({
        "ratios": ratios,
        // The same workloads with the component under an async host.
        "ratios_async_host": headline(WASI_ASYNC, WASM_FLOOR_ASYNC),
        "overshoot_ms": {
            "p50": round(quantile(&wasi_over, 0.5), 2),
            "p99": round(quantile(&wasi_over, 0.99), 2),
            "max": round(quantile(&wasi_over, 1.0), 2),
        },
        "churn": churn,
        "ratios_by_workload": all,
        "workloads": table(&st),
        "nx27017_latency": table(&nx),
        "cold_start_ms": cold.iter().map(|(c, s)| (c.to_string(), round(s * 1e3, 3))).collect::<Map<_, _>>(),
        "cold_start_phases_ms": cold_phases,
        "round_trips_before_first_command": r.round_trips.iter().map(|(c, v)| {
            (c.clone(), round(v.iter().map(|x| *x as f64).sum::<f64>() / v.len().max(1) as f64, 2))
        }).collect::<Map<_, _>>(),
        "deadline": deadline,
        "concurrent": concurrent_json(r, &conc),
        "distant": crate::distant::json(r),
        "footprint": {
            "component_bytes": r.component_bytes,
            "host_rss_bytes_per_instance": r.memory_per_instance.iter()
                .map(|(n, b)| (n.to_string(), round(*b, 0))).collect::<Map<_, _>>(),
        },
        "run": {
            "quick": r.quick,
            "pinned": r.pinned,
            // The wasmtime host's own build: debug inflates every mongo-wasi figure.
            "harness_profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "errors": r.errors,
        },
    })
}

/// The concurrency section's stats: workload -> contender (every iteration
/// is `ops_per_iteration` operations on both sides).
fn concurrent_stats(r: &Results) -> BTreeMap<String, BTreeMap<String, Stat>> {
    r.concurrent
        .samples
        .iter()
        .map(|(w, by)| {
            let bytes = crate::workload::parse(w).map_or(0.0, |w| w.unit_bytes())
                * r.concurrent.ops_per_iteration as f64;
            (
                w.clone(),
                by.iter()
                    .map(|(c, s)| (c.clone(), stat(s, bytes)))
                    .collect(),
            )
        })
        .collect()
}

fn concurrent_json(r: &Results, st: &BTreeMap<String, BTreeMap<String, Stat>>) -> Value {
    let c = &r.concurrent;
    if st.is_empty() {
        return Value::Null;
    }
    let ops = c.ops_per_iteration as f64;
    let mut workloads = Map::new();
    for (w, by) in st {
        let mut m = Map::new();
        for (name, s) in by {
            m.insert(
                name.clone(),
                json!({
                    "ms_per_1000_ops": round(s.median_s / ops * 1e6, 3),
                    "ops_per_s": round(ops / s.median_s, 0),
                    "op_p50_us": round(s.p50_us, 1),
                    "op_p99_us": round(s.p99_us, 1),
                    "iterations": s.iterations,
                }),
            );
        }
        workloads.insert(w.clone(), Value::Object(m));
    }
    json!({
        "width": c.width,
        "ops_per_iteration": c.ops_per_iteration,
        "p3_host": c.p3_host,
        "workloads": workloads,
        "new_connections_per_iteration": c.connections,
        "native_warm_up_connections": c.native_warm_up_connections,
        "seconds": round(c.seconds, 1),
    })
}

pub fn print(r: &Results) {
    let st = stats(&r.work, r, false);
    let cols: Vec<&str> = [WASI, WASI_ASYNC]
        .into_iter()
        .chain(OTHERS)
        .chain([WASM_FLOOR_ASYNC])
        .collect();
    let mut out = String::new();
    let _ =
        writeln!(
        out,
        "\nmedian per iteration (ms) [MB/s]; per-op p50/p99 us where timed per op; harness {}{}",
        if cfg!(debug_assertions) { "debug build (not for figures)" } else { "release build" },
        match &r.pinned {
            Some(p) => format!("; pinned: {p}"),
            None => "; not pinned".into(),
        }
    );
    let _ = write!(out, "{:<22}", "workload");
    for c in &cols {
        let _ = write!(out, " {c:>24}");
    }
    out.push('\n');
    let cell = |s: Option<&Stat>| match s {
        None => "-".to_string(),
        Some(s) if s.p50_us.is_finite() => format!(
            "{:.2} [{:.1}] {:.0}/{:.0}",
            s.median_s * 1e3,
            s.mbps,
            s.p50_us,
            s.p99_us
        ),
        Some(s) => format!("{:.2} [{:.1}]", s.median_s * 1e3, s.mbps),
    };
    for (w, by) in &st {
        let _ = write!(out, "{w:<22}");
        for c in &cols {
            let _ = write!(out, " {:>24}", cell(by.get(*c)));
        }
        out.push('\n');
    }
    let nx = stats(&r.nx, r, true);
    if !nx.is_empty() {
        let _ = writeln!(out, "\nagainst nx-27017 (reference; ~1 ms a round trip):");
        for (w, by) in &nx {
            let _ = write!(out, "{w:<22}");
            for c in &cols {
                let _ = write!(out, " {:>24}", cell(by.get(*c)));
            }
            out.push('\n');
        }
    }
    let j = json(r);
    let conc = &j["concurrent"];
    if let Some(ws) = conc["workloads"].as_object() {
        let _ = writeln!(
            out,
            "\nconcurrent: {} operations at once on one client, {} per iteration, median of \
             iterations; per-op p50/p99 us ({:.0} s)",
            conc["width"], conc["ops_per_iteration"], r.concurrent.seconds
        );
        if let Some(h) = conc["p3_host"].as_str() {
            let _ = writeln!(out, "  {h}");
        }
        let _ = writeln!(
            out,
            "  {:<18} {:<14} {:>14} {:>10} {:>9} {:>9}",
            "workload", "contender", "ms/1000 ops", "ops/s", "p50 us", "p99 us"
        );
        for (w, by) in ws {
            for (c, v) in by.as_object().into_iter().flatten() {
                let f = |k: &str| v[k].to_string();
                let _ = writeln!(
                    out,
                    "  {w:<18} {c:<14} {:>14} {:>10} {:>9} {:>9}",
                    f("ms_per_1000_ops"),
                    f("ops_per_s"),
                    f("op_p50_us"),
                    f("op_p99_us")
                );
            }
        }
        let _ = writeln!(
            out,
            "  new connections per iteration: {} (mongo-wasi-p3: a new process each, warm-up \
             included); {} opened by the native side's warm-up",
            conc["new_connections_per_iteration"], conc["native_warm_up_connections"]
        );
    }
    crate::distant::print(r, &mut out);
    let _ = writeln!(
        out,
        "\nratios (mongo-wasi's cost over the other's; < 1.0: mongo-wasi ahead):"
    );
    if let Some(m) = j["ratios"].as_object() {
        for (k, v) in m {
            let _ = writeln!(out, "  {k:<28} {v}");
        }
    }
    let _ = writeln!(out, "the same, mongo-wasi under an async host:");
    if let Some(m) = j["ratios_async_host"].as_object() {
        for (k, v) in m {
            let _ = writeln!(out, "  {k:<28} {v}");
        }
    }
    let _ = writeln!(out, "cold start (median ms): {}", j["cold_start_ms"]);
    let _ = writeln!(
        out,
        "  mongo-wasi's phases (median ms): {}",
        j["cold_start_phases_ms"]
    );
    let _ = writeln!(
        out,
        "round trips before the first command: {}",
        j["round_trips_before_first_command"]
    );
    let _ = writeln!(out, "deadline overshoot (elapsed - timeoutMS, ms):");
    if let Some(m) = j["deadline"].as_object() {
        for (c, by) in m {
            for (t, v) in by.as_object().into_iter().flatten() {
                let o = &v["overshoot_ms"];
                let _ = writeln!(
                    out,
                    "  {c:<14} timeoutMS={t:<4} p50 {} p99 {} max {}",
                    o["p50"], o["p99"], o["max"]
                );
            }
        }
    }
    let _ = writeln!(out, "churn: {}", j["churn"]);
    let _ = writeln!(out, "footprint: {}", j["footprint"]);
    for e in &r.errors {
        let _ = writeln!(out, "error: {e}");
    }
    print!("{out}");
}

/// A horizontal bar chart of the ratios (log scale, 1.0 in the middle).
pub fn svg(j: &Value) -> String {
    let colours = [
        ("mongodb-rust", "#4e79a7"),
        ("pymongo", "#f28e2b"),
        ("floor", "#9c9c9c"),
        (WASM_FLOOR, "#59a14f"),
    ];
    let mut rows: Vec<(String, &str, f64)> = Vec::new();
    if let Some(m) = j["ratios_by_workload"].as_object() {
        for (w, by) in m {
            for (o, _) in colours {
                if let Some(x) = by.get(o).and_then(Value::as_f64) {
                    rows.push((w.clone(), o, x));
                }
            }
        }
    }
    if let Some(x) = j["ratios"]["cold_start_vs_native"].as_f64() {
        rows.push(("cold_start".into(), "mongodb-rust", x));
    }
    let (left, width, bar, gap, top) = (170.0, 420.0, 12.0, 2.0, 50.0);
    let mut groups: Vec<&str> = Vec::new();
    for (w, _, _) in &rows {
        if groups.last() != Some(&w.as_str()) {
            groups.push(w);
        }
    }
    let height = top + rows.len() as f64 * (bar + gap) + groups.len() as f64 * 8.0 + 56.0;
    // log10 scale from 1/16 to 16.
    let span = 16f64.log10();
    let x_of =
        |r: f64| left + width / 2.0 + (r.clamp(1.0 / 16.0, 16.0).log10() / span) * width / 2.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="11">"#,
        left + width + 70.0
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="18" font-size="13" font-weight="bold">mongo-wasi's cost over each contender's (log scale; left of 1.0: mongo-wasi ahead)</text>"#
    );
    let run = &j["run"];
    let _ = writeln!(
        s,
        r#"<text x="10" y="{}" fill="gray">{}; {}; churn {} new connections in {} ops (mongo-wasi)</text>"#,
        height - 8.0,
        if run["quick"].as_bool() == Some(true) {
            "--quick"
        } else {
            "full run"
        },
        run["pinned"]
            .as_str()
            .map(|p| format!("pinned: {p}"))
            .unwrap_or_else(|| "not pinned".into()),
        j["churn"]["new_connections"],
        j["churn"]["ops"],
    );
    let mut lx = left;
    for (name, col) in colours {
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="28" width="10" height="10" fill="{col}"/><text x="{}" y="37">vs {name}</text>"#,
            lx + 14.0
        );
        lx += 120.0;
    }
    let mut y = top;
    let mut last = "";
    for (w, o, x) in &rows {
        if w != last {
            y += 8.0;
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{w}</text>"#,
                left - 6.0,
                y + bar - 2.0
            );
            last = w;
        }
        let col = colours
            .iter()
            .find(|(n, _)| n == o)
            .map(|c| c.1)
            .unwrap_or("#000");
        let (x0, x1) = (x_of(1.0), x_of(*x));
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{bar}" fill="{col}"/><text x="{:.1}" y="{:.1}">{x:.2}</text>"#,
            x0.min(x1),
            (x1 - x0).abs().max(1.0),
            x0.max(x1) + 3.0,
            y + bar - 2.0
        );
        y += bar + gap;
    }
    let mid = x_of(1.0);
    let _ = writeln!(
        s,
        r#"<line x1="{mid}" y1="{top}" x2="{mid}" y2="{y}" stroke="black"/>"#
    );
    for t in [0.0625, 0.25, 1.0, 4.0, 16.0] {
        let x = x_of(t);
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{y}" x2="{x}" y2="{}" stroke="black"/><text x="{x}" y="{}" text-anchor="middle">{t}</text>"#,
            y + 4.0,
            y + 16.0
        );
    }
    s.push_str("</svg>\n");
    s
}
