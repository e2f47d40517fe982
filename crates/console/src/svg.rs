//! Charts and graphs as server-rendered SVG: no script, no library, and
//! they print.

use maud::{Markup, html};

/// A nice upper bound for an axis: 1, 2 or 5 times a power of ten.
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|v| *v >= max).unwrap_or(10.0 * p)
}

fn short(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Vertical bars, one per `(label, value)`, with a titled axis.
pub fn bars(title: &str, unit: &str, data: &[(String, f64)]) -> Markup {
    let (w, h, left, bottom, top) = (640.0, 220.0, 48.0, 28.0, 12.0);
    let max = nice_max(data.iter().map(|d| d.1).fold(0.0, f64::max));
    let plot_h = h - bottom - top;
    let slot = (w - left - 8.0) / data.len().max(1) as f64;
    html! {
        figure.chart {
            figcaption { (title) }
            svg viewBox=(format!("0 0 {w} {h}")) role="img" aria-label=(title) {
                @for i in 0..=4 {
                    @let y = top + plot_h * (1.0 - i as f64 / 4.0);
                    line.grid x1=(left) x2=(w - 4.0) y1=(y) y2=(y) {}
                    text.axis x=(left - 6.0) y=(y + 4.0) text-anchor="end" { (short(max * i as f64 / 4.0)) }
                }
                @for (i, (label, v)) in data.iter().enumerate() {
                    @let bh = plot_h * v / max;
                    @let x = left + slot * i as f64 + slot * 0.15;
                    rect.bar x=(x) y=(top + plot_h - bh) width=(slot * 0.7) height=(bh) {
                        title { (label) ": " (short(*v)) " " (unit) }
                    }
                    @if data.len() <= 16 || i % 2 == 0 {
                        text.axis x=(x + slot * 0.35) y=(h - 10.0) text-anchor="middle" { (label) }
                    }
                }
            }
        }
    }
}

/// One row per series, a dot per value along a shared axis (run durations
/// per flow).
pub fn strips(title: &str, unit: &str, series: &[(String, Vec<f64>)]) -> Markup {
    let (w, row, left, top) = (640.0, 26.0, 160.0, 8.0);
    let h = top + row * series.len() as f64 + 24.0;
    let max = nice_max(series.iter().flat_map(|s| s.1.iter().copied()).fold(0.0, f64::max));
    let x_of = |v: f64| left + (w - left - 12.0) * v / max;
    html! {
        figure.chart {
            figcaption { (title) }
            svg viewBox=(format!("0 0 {w} {h}")) role="img" aria-label=(title) {
                @for i in 0..=4 {
                    @let v = max * i as f64 / 4.0;
                    line.grid x1=(x_of(v)) x2=(x_of(v)) y1=(top) y2=(h - 20.0) {}
                    text.axis x=(x_of(v)) y=(h - 6.0) text-anchor="middle" { (short(v)) " " (unit) }
                }
                @for (i, (name, values)) in series.iter().enumerate() {
                    @let y = top + row * i as f64 + row / 2.0;
                    text.label x=(left - 8.0) y=(y + 4.0) text-anchor="end" { (truncate(name, 22)) }
                    @for v in values {
                        circle.dot cx=(x_of(*v)) cy=(y) r="4" { title { (name) ": " (short(*v)) " " (unit) } }
                    }
                }
            }
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// A node of a [`graph`]: its id, label, link and a status for its colour.
pub struct Node {
    pub id: String,
    pub label: String,
    pub href: String,
    pub status: String,
}

/// A left-to-right graph: nodes in columns by their depth along the
/// edges (`from` → `to`), edges as curves.
pub fn graph(nodes: &[Node], edges: &[(String, String, String)]) -> Markup {
    use std::collections::BTreeMap;
    let index: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id.as_str(), i)).collect();
    // Depth: the longest path from a root, bounded (cycles cannot run away).
    let mut depth = vec![0usize; nodes.len()];
    for _ in 0..nodes.len() {
        let mut changed = false;
        for (from, to, _) in edges {
            if let (Some(&a), Some(&b)) = (index.get(from.as_str()), index.get(to.as_str()))
                && depth[b] < depth[a] + 1
                && depth[a] + 1 < nodes.len()
            {
                depth[b] = depth[a] + 1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut rows = vec![0usize; nodes.len() + 1];
    let mut pos = vec![(0.0, 0.0); nodes.len()];
    for (i, d) in depth.iter().enumerate() {
        pos[i] = (20.0 + *d as f64 * 220.0, 20.0 + rows[*d] as f64 * 70.0);
        rows[*d] += 1;
    }
    let (nw, nh) = (180.0, 44.0);
    let w = pos.iter().map(|p| p.0).fold(0.0, f64::max) + nw + 20.0;
    let h = pos.iter().map(|p| p.1).fold(0.0, f64::max) + nh + 20.0;
    html! {
        svg.graph viewBox=(format!("0 0 {w} {h}")) width=(w) role="img" aria-label="Flows and their dependencies" {
            defs {
                marker #arrow viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                    path d="M 0 0 L 10 5 L 0 10 z" {}
                }
            }
            @for (from, to, label) in edges {
                @if let (Some(&a), Some(&b)) = (index.get(from.as_str()), index.get(to.as_str())) {
                    @let (x1, y1) = (pos[a].0 + nw, pos[a].1 + nh / 2.0);
                    @let (x2, y2) = (pos[b].0, pos[b].1 + nh / 2.0);
                    path.edge d=(format!("M {x1} {y1} C {} {y1}, {} {y2}, {x2} {y2}", x1 + 40.0, x2 - 40.0)) marker-end="url(#arrow)" {
                        title { "on " (label) }
                    }
                }
            }
            @for (i, n) in nodes.iter().enumerate() {
                a href=(n.href) {
                    rect class={"node " (n.status)} x=(pos[i].0) y=(pos[i].1) width=(nw) height=(nh) rx="8" {}
                    text.nodelabel x=(pos[i].0 + 12.0) y=(pos[i].1 + 19.0) { (truncate(&n.label, 22)) }
                    text.nodestatus x=(pos[i].0 + 12.0) y=(pos[i].1 + 35.0) { (n.status) }
                }
            }
        }
    }
}

/// A timeline: one bar per `(label, start, end, status)`, seconds from the
/// first start.
pub fn timeline(items: &[(String, f64, f64, String)]) -> Markup {
    let (w, row, left) = (640.0, 26.0, 160.0);
    let h = row * items.len() as f64 + 28.0;
    let max = nice_max(items.iter().map(|i| i.2).fold(0.0, f64::max));
    let x_of = |v: f64| left + (w - left - 12.0) * v / max;
    html! {
        svg.timeline viewBox=(format!("0 0 {w} {h}")) role="img" aria-label="Runs of the trace over time" {
            @for i in 0..=4 {
                @let v = max * i as f64 / 4.0;
                line.grid x1=(x_of(v)) x2=(x_of(v)) y1="0" y2=(h - 22.0) {}
                text.axis x=(x_of(v)) y=(h - 6.0) text-anchor="middle" { "+" (short(v)) " s" }
            }
            @for (i, (label, start, end, status)) in items.iter().enumerate() {
                @let y = row * i as f64 + 4.0;
                text.label x=(left - 8.0) y=(y + 14.0) text-anchor="end" { (truncate(label, 22)) }
                rect class={"span " (status)} x=(x_of(*start)) y=(y) width=((x_of(*end) - x_of(*start)).max(3.0)) height=(row - 8.0) rx="3" {
                    title { (label) ": " (status) ", " (short(end - start)) " s" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_end_on_round_numbers() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(130.0), 200.0);
        assert_eq!(nice_max(4_500.0), 5_000.0);
        assert_eq!(short(1_500_000.0), "1.5M");
    }

    #[test]
    fn a_chain_of_flows_is_laid_out_left_to_right() {
        let n = |id: &str| Node { id: id.into(), label: id.into(), href: "#".into(), status: "active".into() };
        let svg = graph(
            &[n("a"), n("b"), n("c")],
            &[("a".into(), "b".into(), "success".into()), ("b".into(), "c".into(), "success".into())],
        )
        .into_string();
        assert!(svg.contains(r#"x="20""#) && svg.contains(r#"x="240""#) && svg.contains(r#"x="460""#), "{svg}");
        assert_eq!(svg.matches("class=\"edge\"").count(), 2);
    }

    #[test]
    fn a_cycle_does_not_loop_forever() {
        let n = |id: &str| Node { id: id.into(), label: id.into(), href: "#".into(), status: "active".into() };
        let svg =
            graph(&[n("a"), n("b")], &[("a".into(), "b".into(), "x".into()), ("b".into(), "a".into(), "x".into())]);
        assert!(svg.into_string().contains("<svg"));
    }
}
