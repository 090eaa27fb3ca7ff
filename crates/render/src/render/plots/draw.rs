//! Drawing a chart (a line chart on log or linear axes, or a heat map) with plotters, to PNG
//! bytes or SVG text. Text is set in DejaVu Sans from the `dejavu` crate, registered once: no
//! system font is looked up.

use super::{Axis, Chart, Drawn, Heatmap, LineChart, Plot, HEIGHT, WIDTH};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::colors::colormaps::{ColorMap, ViridisRGB};
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::sync::OnceLock;

/// Okabe & Ito's colour-blind-safe palette for runs (their yellow is too faint on white).
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(213, 94, 0),    // vermillion
    RGBColor(0, 158, 115),   // bluish green
    RGBColor(230, 159, 0),   // orange
    RGBColor(204, 121, 167), // reddish purple
    RGBColor(86, 180, 233),  // sky blue
];

/// The colour index of reference lines (published plateau, 1.0x): black, never a run's.
pub const REFERENCE: usize = usize::MAX;

pub(super) const FONT: &str = "sans-serif";

/// Register DejaVu Sans as plotters' `sans-serif` (once per process).
fn register_fonts() -> Result<(), String> {
    static FONTS: OnceLock<Result<(), String>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
                .and_then(|_| register_font(FONT, FontStyle::Bold, dejavu::sans::bold()))
                .map_err(|_| "the embedded DejaVu Sans font did not load".to_string())
        })
        .clone()
}

pub fn colour(index: usize) -> RGBColor {
    if index == REFERENCE {
        return RGBColor(0, 0, 0);
    }
    PALETTE[index % PALETTE.len()]
}

type Fallible = Result<(), String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// The chart as a PNG of WIDTH x HEIGHT pixels.
pub fn png(chart: &Chart) -> Result<Vec<u8>, String> {
    register_fonts()?;
    let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, chart)?;
        root.present().map_err(err)?;
    }
    let mut out = Vec::with_capacity(64 * 1024);
    {
        let mut encoder = png::Encoder::new(&mut out, WIDTH, HEIGHT);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fast);
        let mut writer = encoder.write_header().map_err(err)?;
        writer.write_image_data(&rgb).map_err(err)?;
        writer.finish().map_err(err)?;
    }
    Ok(out)
}

/// The chart as an SVG document of WIDTH x HEIGHT.
pub fn svg(chart: &Chart) -> Result<String, String> {
    register_fonts()?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, chart)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> Fallible {
    root.fill(&WHITE).map_err(err)?;
    match chart {
        Chart::Line(c) => line_chart(root, c),
        Chart::Heat(h) => heatmap(root, h),
        Chart::Bars(b) => super::bars::draw(root, b),
    }
}

/// Where a value sits on an axis (logarithmic axes are drawn in log space).
fn place(axis: Axis, v: f64) -> f64 {
    match axis {
        Axis::Log2Bytes => v.max(1.0).log2(),
        Axis::Log10 => v.max(1e-12).log10(),
        Axis::Linear => v,
    }
}

/// The label of an axis position.
fn tick(axis: Axis, at: f64) -> String {
    match axis {
        Axis::Log2Bytes => {
            let rounded = at.round();
            if (at - rounded).abs() > 1e-6 || !(0.0..=62.0).contains(&rounded) {
                return String::new();
            }
            crate::units::format_size(1u64 << rounded as u32).replace(' ', "")
        }
        Axis::Log10 => {
            let rounded = at.round();
            if (at - rounded).abs() > 1e-6 {
                return String::new();
            }
            match rounded as i32 {
                e @ -3..=-1 => format!("{:.*}", (-e) as usize, 10f64.powi(e)),
                e @ 0..=3 => format!("{}", 10u32.pow(e as u32)),
                e => format!("1e{e}"),
            }
        }
        Axis::Linear => {
            if at.abs() >= 100.0 {
                return format!("{at:.0}");
            }
            let text = format!("{at:.2}");
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    }
}

/// The drawn range of an axis over these values, with a margin; log axes snap to whole
/// powers so every label is a round size or decade.
fn range(axis: Axis, values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = values
        .filter(|v| v.is_finite())
        .map(|v| place(axis, v))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    match axis {
        Axis::Log2Bytes | Axis::Log10 => {
            let (l, h) = (lo.floor(), hi.ceil());
            (l, if h > l { h } else { l + 1.0 })
        }
        Axis::Linear => {
            let lo = if from_zero { lo.min(0.0) } else { lo };
            let span = if hi > lo { hi - lo } else { hi.abs().max(1.0) };
            (
                lo - if from_zero { 0.0 } else { span * 0.05 },
                hi + span * 0.08,
            )
        }
    }
}

fn label_count(axis: Axis, (lo, hi): (f64, f64)) -> usize {
    match axis {
        // One label per power of two, thinned to at most 18.
        Axis::Log2Bytes | Axis::Log10 => (hi - lo).round() as usize + 1,
        Axis::Linear => 10,
    }
    .clamp(2, 18)
}

fn line_chart<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &LineChart) -> Fallible {
    let xs = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(c.bands.iter().flat_map(|b| b.points.iter().map(|p| p.0)));
    let ys = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(
            c.bands
                .iter()
                .flat_map(|b| b.points.iter().flat_map(|p| [p.1, p.2])),
        )
        .chain(c.hlines.iter().map(|h| h.y));
    let xr = range(c.x_axis, xs, false);
    let yr = range(c.y_axis, ys, c.y_from_zero);
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 26).into_font().style(FontStyle::Bold))
        .margin(18)
        .x_label_area_size(62)
        .y_label_area_size(86)
        .build_cartesian_2d(xr.0..xr.1, yr.0..yr.1)
        .map_err(err)?;
    let (x_axis, y_axis) = (c.x_axis, c.y_axis);
    let x_fmt = move |v: &f64| tick(x_axis, *v);
    let y_fmt = move |v: &f64| tick(y_axis, *v);
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .x_labels(label_count(c.x_axis, xr))
        .y_labels(label_count(c.y_axis, yr))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 18))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(err)?;
    let at = |x: f64, y: f64| (place(x_axis, x), place(y_axis, y));
    for band in &c.bands {
        let fill = colour(band.colour).mix(0.15);
        let mut outline: Vec<(f64, f64)> = band.points.iter().map(|p| at(p.0, p.1)).collect();
        outline.extend(band.points.iter().rev().map(|p| at(p.0, p.2)));
        chart
            .draw_series(std::iter::once(Polygon::new(outline, fill.filled())))
            .map_err(err)?
            .label(&band.label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 22, y + 6)], fill.filled()));
    }
    for h in &c.hlines {
        let style = colour(h.colour).stroke_width(2);
        let y = place(y_axis, h.y);
        chart
            .draw_series(DashedLineSeries::new([(xr.0, y), (xr.1, y)], 10, 6, style))
            .map_err(err)?
            .label(&h.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 22, y)], style));
    }
    for s in &c.series {
        let style = colour(s.colour).stroke_width(if s.dashed { 2 } else { 3 });
        let points: Vec<(f64, f64)> = s.points.iter().map(|p| at(p.0, p.1)).collect();
        let drawn = if s.dashed {
            chart.draw_series(DashedLineSeries::new(points.clone(), 8, 5, style))
        } else {
            chart.draw_series(LineSeries::new(points.clone(), style))
        }
        .map_err(err)?;
        drawn
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 22, y)], style));
        if s.markers {
            chart
                .draw_series(
                    points
                        .iter()
                        .map(|p| Circle::new(*p, 4, colour(s.colour).filled())),
                )
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .position(c.legend_at.clone())
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .draw()
        .map_err(err)?;
    Ok(())
}

fn heatmap<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, h: &Heatmap) -> Fallible {
    let (nx, ny) = (h.x_ticks.len().max(1), h.y_ticks.len().max(1));
    let values = h.values.iter().flatten().flatten().copied();
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, u), v| {
            (l.min(v), u.max(v))
        });
    let mut chart = ChartBuilder::on(root)
        .caption(&h.title, (FONT, 26).into_font().style(FontStyle::Bold))
        .margin(18)
        .x_label_area_size(62)
        .y_label_area_size(110)
        .build_cartesian_2d(0f64..nx as f64, 0f64..ny as f64)
        .map_err(err)?;
    let x_ticks = h.x_ticks.clone();
    let y_ticks = h.y_ticks.clone();
    let x_fmt = move |v: &f64| cell_tick(&x_ticks, *v);
    let y_fmt = move |v: &f64| cell_tick(&y_ticks, *v);
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(&h.x_label)
        .y_desc(&h.y_label)
        .x_labels(nx * 2 + 1)
        .y_labels(ny * 2 + 1)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(err)?;
    let map = ViridisRGB;
    let span = if hi > lo { hi - lo } else { 1.0 };
    for (yi, row) in h.values.iter().enumerate() {
        for (xi, value) in row.iter().enumerate() {
            let (x0, y0) = (xi as f64, yi as f64);
            let fill = match value {
                Some(v) if v.is_finite() => {
                    let c: RGBColor = map.get_color(((v - lo) / span) as f32);
                    c
                }
                _ => RGBColor(220, 220, 220),
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, y0), (x0 + 1.0, y0 + 1.0)],
                    fill.filled(),
                )))
                .map_err(err)?;
            let light = value.is_some_and(|v| (v - lo) / span < 0.55);
            let text_colour = if light { WHITE } else { BLACK };
            let text = value.map(&h.cell_text).unwrap_or_else(|| "-".into());
            let style = (FONT, 16)
                .into_font()
                .color(&text_colour)
                .pos(Pos::new(HPos::Center, VPos::Center));
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (x0 + 0.5, y0 + 0.5),
                    style,
                )))
                .map_err(err)?;
        }
    }
    if let Some((bx, by, word)) = h.framed {
        let (x0, y0) = (bx as f64, by as f64);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0 + 0.03, y0 + 0.03), (x0 + 0.97, y0 + 0.97)],
                colour(1).stroke_width(5),
            )))
            .map_err(err)?;
        let style = (FONT, 14)
            .into_font()
            .style(FontStyle::Bold)
            .color(&colour(1))
            .pos(Pos::new(HPos::Center, VPos::Top));
        chart
            .draw_series(std::iter::once(Text::new(
                word.to_string(),
                (x0 + 0.5, y0 + 0.93),
                style,
            )))
            .map_err(err)?;
    }
    Ok(())
}

/// Heat-map axes put a label at the middle of each cell and nothing at its edges.
pub(super) fn cell_tick(ticks: &[String], at: f64) -> String {
    let cell = at - 0.5;
    if (cell - cell.round()).abs() > 1e-6 || cell < 0.0 {
        return String::new();
    }
    ticks
        .get(cell.round() as usize)
        .cloned()
        .unwrap_or_default()
}

/// A plot drawn to PNG and SVG.
impl Plot {
    pub fn draw(&self) -> Result<Drawn, String> {
        let failed = |what: &str, e: String| format!("plot {} ({what}): {e}", self.name);
        Ok(Drawn {
            name: self.name.clone(),
            title: self.title.clone(),
            caption: self.caption.clone(),
            png: png(&self.chart).map_err(|e| failed("PNG", e))?,
            svg: svg(&self.chart).map_err(|e| failed("SVG", e))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_ticks_are_binary_sizes() {
        assert_eq!(tick(Axis::Log2Bytes, 3.0), "8B");
        assert_eq!(tick(Axis::Log2Bytes, 20.0), "1MiB");
        assert_eq!(tick(Axis::Log2Bytes, 34.0), "16GiB");
        assert_eq!(tick(Axis::Log2Bytes, 3.5), "");
        assert_eq!(tick(Axis::Log10, -1.0), "0.1");
        assert_eq!(tick(Axis::Log10, 3.0), "1000");
        assert_eq!(tick(Axis::Log10, 6.0), "1e6");
        assert_eq!(
            range(Axis::Log2Bytes, [8.0, 3e8].into_iter(), false),
            (3.0, 29.0)
        );
    }

    #[test]
    fn heat_map_labels_sit_in_the_middle_of_cells() {
        let t = vec!["1".to_string(), "25".to_string()];
        assert_eq!(cell_tick(&t, 0.5), "1");
        assert_eq!(cell_tick(&t, 1.5), "25");
        assert_eq!(cell_tick(&t, 1.0), "");
        assert_eq!(cell_tick(&t, 2.5), "");
    }
}
