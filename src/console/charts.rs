//! Server-rendered SVG charts for the console (issue 33): lines with a point per nonzero value,
//! or stacked bars, over equal time buckets, with a zero-based y axis, UTC times on the x axis,
//! a `<title>` tooltip on every point and bar, a legend, and `role="img"` with an `aria-label`
//! that says in words what the chart shows. An empty chart says "No data in this window".
//!
//! Inline SVG and `style` attributes are all it needs, so it runs under the console's CSP
//! (`script-src` by hash only, `style-src 'unsafe-inline'`): no script, no external resource.
//! Colours come with a second cue (a dash pattern per line, the legend's totals), never alone.

use chrono::{DateTime, Utc};
use maud::{html, Markup};

/// Drawing area in SVG units; the SVG scales to its container's width.
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 200.0;
const LEFT: f64 = 40.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 24.0;

/// Okabe–Ito: told apart with every common colour-vision deficiency.
const PALETTE: [&str; 8] = ["#0072B2", "#009E73", "#D55E00", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"];
const DASHES: [&str; 4] = ["", "6 3", "2 2", "8 3 2 3"];

/// The charts' own rules, once per page that has charts.
pub const CSS: &str = "
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(34rem, 1fr)); gap: 1rem; }
.chart { margin: 0; border: 1px solid #ccc; padding: .5rem; }
.chart figcaption { font-weight: 600; }
.chart svg { width: 100%; height: auto; display: block; }
.chart ul.legend { list-style: none; display: flex; flex-wrap: wrap; gap: .25rem 1rem; margin: .25rem 0 0; padding: 0; font-size: .9rem; }
.chart .swatch { display: inline-block; width: 1.5rem; height: .6rem; margin-right: .3rem; vertical-align: middle; }
";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A line per series, a point on each nonzero value.
    Lines,
    /// Each bucket's values stacked into one bar.
    StackedBars,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub values: Vec<i64>,
}

impl Series {
    pub fn new(name: impl Into<String>, values: Vec<i64>) -> Self {
        Series { name: name.into(), values }
    }
}

#[derive(Debug, Clone)]
pub struct Chart {
    /// The `id` of the chart's `figure`.
    pub id: String,
    pub title: String,
    /// What the chart shows, in words: its `aria-label` after the title.
    pub summary: String,
    pub style: Style,
    /// The values are levels (a queue's size at each bucket's end), not counts per bucket: the
    /// legend says the last and the largest instead of the sum.
    pub levels: bool,
    /// Each bucket's start, oldest first.
    pub starts: Vec<DateTime<Utc>>,
    pub series: Vec<Series>,
}

/// The smallest of 1, 2, 5 × 10ⁿ at or above `max` (at least 1): the y axis's top.
pub fn nice_max(max: i64) -> i64 {
    let mut step = 1;
    loop {
        for m in [1, 2, 5] {
            if step * m >= max {
                return step * m;
            }
        }
        step *= 10;
    }
}

/// Where bucket `i` of `n` is centred, in SVG units.
pub fn x_centre(i: usize, n: usize) -> f64 {
    LEFT + (i as f64 + 0.5) * slot(n)
}

fn x_edge(i: usize, n: usize) -> f64 {
    LEFT + i as f64 * slot(n)
}

fn slot(n: usize) -> f64 {
    (WIDTH - LEFT - RIGHT) / n.max(1) as f64
}

/// Where `value` is on an axis topped at `top`, in SVG units (0 at the bottom of the plot).
pub fn y_of(value: i64, top: i64) -> f64 {
    let plot = HEIGHT - TOP - BOTTOM;
    TOP + plot - plot * value as f64 / top.max(1) as f64
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

fn time(t: &DateTime<Utc>) -> String {
    t.format("%H:%M").to_string()
}

impl Chart {
    fn buckets(&self) -> usize {
        self.starts.len()
    }

    /// Whether any value is nonzero.
    pub fn has_data(&self) -> bool {
        self.series.iter().any(|s| s.values.iter().any(|v| *v != 0))
    }

    /// The axis's top: the largest value, or bucket total when stacked.
    fn top(&self) -> i64 {
        let max = match self.style {
            Style::Lines => self.series.iter().flat_map(|s| s.values.iter().copied()).max().unwrap_or(0),
            Style::StackedBars => {
                (0..self.buckets()).map(|i| self.series.iter().map(|s| value(s, i)).sum()).max().unwrap_or(0)
            }
        };
        nice_max(max)
    }

    pub fn render(&self) -> Markup {
        let n = self.buckets();
        let top = self.top();
        let label = format!("{}: {}", self.title, self.summary);
        let every = n.div_ceil(6).max(1);
        let bottom = HEIGHT - BOTTOM;
        // The y axis: 0, half and top, with light grid lines.
        let ticks = if top == 1 { vec![0, 1] } else { vec![0, top / 2, top] };
        html! {
            figure.chart id=(self.id) {
                figcaption { (self.title) }
                svg xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(label) {
                    title { (label) }
                    @for tick in ticks {
                        line x1=(LEFT) x2=(WIDTH - RIGHT) y1=(fmt(y_of(tick, top))) y2=(fmt(y_of(tick, top))) stroke="#ddd" {}
                        text.y-tick x=(LEFT - 4.0) y=(fmt(y_of(tick, top) + 4.0)) text-anchor="end" font-size="13" fill="#333" { (tick) }
                    }
                    line x1=(LEFT) x2=(LEFT) y1=(TOP) y2=(bottom) stroke="#555" {}
                    line x1=(LEFT) x2=(WIDTH - RIGHT) y1=(bottom) y2=(bottom) stroke="#555" {}
                    @for (i, start) in self.starts.iter().enumerate() {
                        @if i % every == 0 {
                            line x1=(fmt(x_edge(i, n))) x2=(fmt(x_edge(i, n))) y1=(bottom) y2=(bottom + 4.0) stroke="#555" {}
                            text.x-tick x=(fmt(x_edge(i, n))) y=(HEIGHT - 6.0) text-anchor="middle" font-size="13" fill="#333" { (time(start)) }
                        }
                    }
                    @if self.has_data() {
                        @match self.style {
                            Style::Lines => { (self.lines(top)) }
                            Style::StackedBars => { (self.bars(top)) }
                        }
                    } @else {
                        text.no-data x=(fmt(LEFT + (WIDTH - LEFT - RIGHT) / 2.0)) y=(fmt(TOP + (bottom - TOP) / 2.0)) text-anchor="middle" font-size="14" fill="#444" { "No data in this window" }
                    }
                }
                @if self.has_data() {
                    ul.legend {
                        @for (k, s) in self.series.iter().enumerate() {
                            li {
                                svg.swatch viewBox="0 0 24 10" aria-hidden="true" {
                                    @match self.style {
                                        Style::Lines => { line x1="0" x2="24" y1="5" y2="5" stroke=(PALETTE[k % PALETTE.len()]) stroke-width="2.5" stroke-dasharray=(DASHES[k % DASHES.len()]) {} }
                                        Style::StackedBars => { rect x="0" y="0" width="24" height="10" fill=(PALETTE[k % PALETTE.len()]) {} }
                                    }
                                }
                                (s.name) ": " (self.total_words(s))
                            }
                        }
                    }
                } @else {
                    p.hint.no-data { "No data in this window." }
                }
            }
        }
    }

    /// A series' figure for the legend: its sum for counts; for a level, the last value and the
    /// largest.
    fn total_words(&self, s: &Series) -> String {
        match self.levels {
            false => s.values.iter().sum::<i64>().to_string(),
            true => {
                let now = s.values.last().copied().unwrap_or(0);
                format!("{now} now, at most {}", s.values.iter().copied().max().unwrap_or(0))
            }
        }
    }

    fn lines(&self, top: i64) -> Markup {
        let n = self.buckets();
        html! {
            @for (k, s) in self.series.iter().enumerate() {
                @let colour = PALETTE[k % PALETTE.len()];
                @let points: Vec<String> = (0..n).map(|i| format!("{},{}", fmt(x_centre(i, n)), fmt(y_of(value(s, i), top)))).collect();
                polyline.series data-series=(s.name) points=(points.join(" ")) fill="none" stroke=(colour) stroke-width="2" stroke-dasharray=(DASHES[k % DASHES.len()]) {}
                @for i in 0..n {
                    @let v = value(s, i);
                    @if v != 0 {
                        circle.point data-series=(s.name) data-value=(v) cx=(fmt(x_centre(i, n))) cy=(fmt(y_of(v, top))) r="3" fill=(colour) {
                            title { (time(&self.starts[i])) " UTC · " (s.name) ": " (v) }
                        }
                    }
                }
            }
        }
    }

    fn bars(&self, top: i64) -> Markup {
        let n = self.buckets();
        let width = (slot(n) * 0.8).max(1.0);
        // Each nonzero value as (bucket, series, value, the stack below it).
        let mut stacked = Vec::new();
        for i in 0..n {
            let mut below = 0;
            for (k, s) in self.series.iter().enumerate() {
                let v = value(s, i);
                if v != 0 {
                    stacked.push((i, k, s, v, below));
                    below += v;
                }
            }
        }
        html! {
            @for (i, k, s, v, below) in stacked {
                @let (y_top, y_bottom) = (y_of(below + v, top), y_of(below, top));
                rect.bar data-series=(s.name) data-value=(v) x=(fmt(x_centre(i, n) - width / 2.0)) y=(fmt(y_top)) width=(fmt(width)) height=(fmt(y_bottom - y_top)) fill=(PALETTE[k % PALETTE.len()]) {
                    title { (time(&self.starts[i])) " UTC · " (s.name) ": " (v) }
                }
            }
        }
    }
}

fn value(s: &Series, i: usize) -> i64 {
    s.values.get(i).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    fn starts(n: usize) -> Vec<DateTime<Utc>> {
        let t0 = DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z").unwrap().to_utc();
        (0..n).map(|i| t0 + TimeDelta::minutes(i as i64)).collect()
    }

    fn chart(style: Style, series: Vec<Series>) -> Chart {
        let n = series.first().map_or(4, |s| s.values.len());
        Chart {
            id: "c".into(),
            title: "Withdrawals".into(),
            summary: "a summary".into(),
            style,
            levels: false,
            starts: starts(n),
            series,
        }
    }

    #[test]
    fn the_axis_top_is_a_round_number_at_or_above_the_largest_value() {
        let tops: Vec<i64> = [0, 1, 2, 3, 6, 10, 11, 49, 51, 999].iter().map(|m| nice_max(*m)).collect();
        assert_eq!(tops, vec![1, 1, 2, 5, 10, 10, 20, 50, 100, 1000]);
    }

    #[test]
    fn points_map_to_their_bucket_centre_and_their_height() {
        // Plot 40..630 wide (590 / 4 buckets = 147.5 each), 10..176 high (166).
        assert_eq!(x_centre(0, 4), 40.0 + 73.75);
        assert_eq!(x_centre(3, 4), 40.0 + 3.5 * 147.5);
        assert_eq!(y_of(0, 10), 176.0);
        assert_eq!(y_of(10, 10), 10.0);
        assert_eq!(y_of(5, 10), 93.0);

        let svg = chart(Style::Lines, vec![Series::new("created", vec![0, 5, 0, 10])]).render().into_string();
        assert_eq!(svg.matches("<circle").count(), 2, "a point per nonzero value: {svg}");
        assert!(svg.contains(r#"data-value="5" cx="261.2" cy="93.0""#), "{svg}");
        assert!(svg.contains(r#"data-value="10" cx="556.2" cy="10.0""#), "{svg}");
        assert!(svg.contains(r#"points="113.8,176.0 261.2,93.0 408.8,176.0 556.2,10.0""#), "{svg}");
        assert!(svg.contains("<title>12:01 UTC · created: 5</title>"), "a tooltip per point: {svg}");
        assert!(svg.contains(r#"role="img" aria-label="Withdrawals: a summary""#), "{svg}");
        assert!(!svg.contains("No data"), "{svg}");
        assert!(svg.contains(">created: 15</li>"), "the legend totals the series: {svg}");
    }

    #[test]
    fn stacked_bars_sit_on_each_other() {
        let svg = chart(
            Style::StackedBars,
            vec![Series::new("retries_exhausted", vec![1, 0]), Series::new("code_bug", vec![1, 2])],
        )
        .render()
        .into_string();
        // Top 2: the first bucket's two bars share the plot's height, the second's one bar fills it.
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 3, "{svg}");
        assert!(
            svg.contains(
                r#"data-series="retries_exhausted" data-value="1" x="69.5" y="93.0" width="236.0" height="83.0""#
            ),
            "{svg}"
        );
        assert!(
            svg.contains(r#"data-series="code_bug" data-value="1" x="69.5" y="10.0" width="236.0" height="83.0""#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"data-series="code_bug" data-value="2" x="364.5" y="10.0" width="236.0" height="166.0""#),
            "{svg}"
        );
    }

    #[test]
    fn an_empty_series_is_an_empty_chart_that_says_so() {
        for style in [Style::Lines, Style::StackedBars] {
            for series in [vec![], vec![Series::new("created", vec![0, 0, 0])]] {
                let svg = chart(style, series).render().into_string();
                assert!(svg.contains("No data in this window"), "{svg}");
                assert!(!svg.contains("<circle") && !svg.contains("class=\"bar\""), "{svg}");
                assert!(svg.contains("<svg") && svg.contains("role=\"img\""), "still a chart with its axes: {svg}");
            }
        }
    }

    #[test]
    fn svg_elements_are_closed_so_html_parsing_does_not_nest_them() {
        let svg = chart(Style::Lines, vec![Series::new("created", vec![1, 2])]).render().into_string();
        for element in ["line", "circle", "polyline", "text"] {
            assert_eq!(
                svg.matches(&format!("<{element} ")).count(),
                svg.matches(&format!("</{element}>")).count(),
                "every <{element}> is closed: {svg}"
            );
        }
    }
}
