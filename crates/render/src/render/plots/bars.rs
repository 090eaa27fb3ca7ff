//! Stacked bars: one bar per label, its parts stacked bottom first, a legend of the parts.

// mutual import with crate::render::plots::draw: bars are one more kind `draw` dispatches
// to, drawn in its font, palette and tick labels.
use super::draw::{cell_tick, colour, FONT};
use super::StackedBars;
use plotters::coord::Shift;
use plotters::prelude::*;

pub fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    b: &StackedBars,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let n = b.labels.len().max(1);
    let top = (0..n)
        .map(|i| {
            b.parts
                .iter()
                .map(|(_, _, v)| v.get(i).copied().unwrap_or(0.0).max(0.0))
                .sum::<f64>()
        })
        .fold(0.0, f64::max)
        .max(1e-9);
    let mut chart = ChartBuilder::on(root)
        .caption(&b.title, (FONT, 26).into_font().style(FontStyle::Bold))
        .margin(18)
        .x_label_area_size(62)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..n as f64, 0f64..top * 1.15)
        .map_err(|e| err(&e))?;
    let labels = b.labels.clone();
    let x_fmt = move |v: &f64| cell_tick(&labels, *v);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(&b.x_label)
        .y_desc(&b.y_label)
        .x_labels((n * 2 + 1).min(61))
        .x_label_formatter(&x_fmt)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(|e| err(&e))?;
    let mut base = vec![0.0; n];
    for (name, c, values) in &b.parts {
        let fill = colour(*c);
        let bars: Vec<Rectangle<(f64, f64)>> = (0..n)
            .map(|i| {
                let v = values.get(i).copied().unwrap_or(0.0).max(0.0);
                let r = Rectangle::new(
                    [(i as f64 + 0.15, base[i]), (i as f64 + 0.85, base[i] + v)],
                    fill.filled(),
                );
                base[i] += v;
                r
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], fill.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 16))
        .draw()
        .map_err(|e| err(&e))?;
    Ok(())
}
