//! Plots for reports: what a chart shows (`Chart`, built from documents in `figures`), and how
//! it is drawn to PNG and SVG (`draw`).

pub mod bars;
pub mod draw;

/// Every plot's size in pixels: wide enough for 8 B … 16 GiB labels, and a 16:9-ish page.
pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 700;

/// How values map onto an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// Message sizes in bytes, one grid line per power of two, labelled 8B … 16GiB.
    Log2Bytes,
    /// Decades (latency in µs).
    Log10,
    Linear,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Index into the palette: the same run keeps its colour in every plot.
    pub colour: usize,
    pub dashed: bool,
    pub markers: bool,
}

/// A shaded range (the expected band): (x, low, high).
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    pub label: String,
    pub points: Vec<(f64, f64, f64)>,
    pub colour: usize,
}

/// A horizontal reference line (a published plateau, ratio 1.0).
#[derive(Debug, Clone, PartialEq)]
pub struct HLine {
    pub label: String,
    pub y: f64,
    pub colour: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: Axis,
    pub y_axis: Axis,
    pub y_from_zero: bool,
    pub series: Vec<Series>,
    pub bands: Vec<Band>,
    pub hlines: Vec<HLine>,
    pub legend_at: plotters::chart::SeriesLabelPosition,
}

/// Cells coloured by value (row = y tick, column = x tick), the best one framed.
pub struct Heatmap {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_ticks: Vec<String>,
    pub y_ticks: Vec<String>,
    pub values: Vec<Vec<Option<f64>>>,
    pub cell_text: Box<dyn Fn(f64) -> String + Send + Sync>,
    /// A cell to frame (column, row) and the word written in it ("best", "slowest").
    pub framed: Option<(usize, usize, &'static str)>,
}

/// Bars, one per label, each stacked from its parts (a step's compute, exposed
/// communication, loader wait, other idle); the parts' names make the legend.
#[derive(Debug, Clone, PartialEq)]
pub struct StackedBars {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// One per bar.
    pub labels: Vec<String>,
    /// The parts, bottom first: name, palette index, one value per bar.
    pub parts: Vec<(String, usize, Vec<f64>)>,
}

pub enum Chart {
    Line(LineChart),
    Heat(Heatmap),
    Bars(StackedBars),
}

/// A plot as the report lists it: a file stem, a title and a caption saying what the reader
/// sees and where its numbers came from.
pub struct Plot {
    pub name: String,
    pub title: String,
    pub caption: String,
    pub chart: Chart,
}

/// A plot drawn both ways.
#[derive(Debug, Clone)]
pub struct Drawn {
    pub name: String,
    pub title: String,
    pub caption: String,
    pub png: Vec<u8>,
    pub svg: String,
}
