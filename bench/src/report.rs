//! A benchmark report: named figures written as JSON, and charts (bars, or
//! lines over time) written as one PNG.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::OnceLock;

use plotters::prelude::*;

/// Where the chart's font comes from. Debian's fonts-dejavu-core puts it here;
/// without it the chart is drawn with bars and no text.
const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const FONT_FAMILY: &str = "sans-serif";

/// Set by `narad bench NAME --json`: a file that receives a copy of the
/// report's JSON.
pub const JSON_COPY_ENV: &str = "NARAD_BENCH_JSON_COPY";

/// Size of one chart panel in pixels.
const PANEL_WIDTH_PX: u32 = 1000;
const PANEL_HEIGHT_PX: u32 = 60;
const BAR_HEIGHT_PX: u32 = 28;
/// Height of one line-chart panel in pixels.
const LINES_HEIGHT_PX: u32 = 320;
/// Colours of a line chart's series, in order (then repeated).
const LINE_COLOURS: [RGBColor; 4] = [BLUE, RED, GREEN, MAGENTA];

/// One bar chart: a title, the unit of its values, and labelled bars.
#[derive(Debug, Clone)]
struct Bars {
    title: String,
    unit: String,
    bars: Vec<(String, f64)>,
}

/// One line chart: a title, the units of its axes, and named series of
/// (x, y) points.
#[derive(Debug, Clone)]
struct Lines {
    title: String,
    x_unit: String,
    y_unit: String,
    series: Vec<(String, Vec<(f64, f64)>)>,
}

/// One panel of the PNG.
#[derive(Debug, Clone)]
enum Chart {
    Bars(Bars),
    Lines(Lines),
}

impl Chart {
    fn height_px(&self) -> u32 {
        match self {
            Self::Bars(chart) => PANEL_HEIGHT_PX + BAR_HEIGHT_PX * chart.bars.len() as u32,
            Self::Lines(_) => LINES_HEIGHT_PX,
        }
    }
}

/// Figures of one benchmark run.
#[derive(Debug, Clone)]
pub struct Report {
    name: String,
    values: BTreeMap<String, f64>,
    notes: BTreeMap<String, String>,
    charts: Vec<Chart>,
}

impl Report {
    /// An empty report; it will be written as `<name>.json` and `<name>.png`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            values: BTreeMap::new(),
            notes: BTreeMap::new(),
            charts: Vec::new(),
        }
    }

    /// Sets a figure, replacing an earlier one of the same key.
    pub fn set(&mut self, key: &str, value: f64) -> &mut Self {
        self.values.insert(key.to_string(), value);
        self
    }

    /// The figure stored under `key`, if any.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.values.get(key).copied()
    }

    /// Sets a text fact about the run (backend, kernel, file system).
    pub fn note(&mut self, key: &str, value: &str) -> &mut Self {
        self.notes.insert(key.to_string(), value.to_string());
        self
    }

    /// Adds a bar chart to the PNG.
    pub fn bars(&mut self, title: &str, unit: &str, bars: &[(&str, f64)]) -> &mut Self {
        self.charts.push(Chart::Bars(Bars {
            title: title.to_string(),
            unit: unit.to_string(),
            bars: bars
                .iter()
                .map(|(label, value)| (label.to_string(), *value))
                .collect(),
        }));
        self
    }

    /// Adds a line chart to the PNG: each series is a name and its (x, y)
    /// points in x order, drawn on shared axes from 0.
    pub fn lines(
        &mut self,
        title: &str,
        (x_unit, y_unit): (&str, &str),
        series: &[(&str, Vec<(f64, f64)>)],
    ) -> &mut Self {
        self.charts.push(Chart::Lines(Lines {
            title: title.to_string(),
            x_unit: x_unit.to_string(),
            y_unit: y_unit.to_string(),
            series: series
                .iter()
                .map(|(name, points)| (name.to_string(), points.clone()))
                .collect(),
        }));
        self
    }

    /// The report as JSON: `{"benchmark": name, "notes": {..}, <key>: value, ..}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut object = serde_json::Map::new();
        object.insert("benchmark".into(), self.name.clone().into());
        object.insert(
            "notes".into(),
            self.notes
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect(),
        );
        for (key, value) in &self.values {
            object.insert(key.clone(), (*value).into());
        }
        serde_json::Value::Object(object)
    }

    /// Writes `<name>.json` and, if there are charts, `<name>.png` into
    /// [`crate::report_dir`]. Returns the JSON path.
    ///
    /// # Errors
    /// When a file cannot be written or the chart cannot be drawn.
    pub fn write(&self) -> io::Result<PathBuf> {
        self.write_to(&crate::report_dir())
    }

    /// Writes `<name>.json` and, if there are charts, `<name>.png` into
    /// `dir`. Returns the JSON path.
    ///
    /// # Errors
    /// When a file cannot be written or the chart cannot be drawn.
    pub fn write_to(&self, dir: &std::path::Path) -> io::Result<PathBuf> {
        // `narad bench NAME --json` asks for the report on its standard
        // output: it names a file here and prints it once the run ends.
        let copy = std::env::var_os(JSON_COPY_ENV).map(PathBuf::from);
        self.write_with_copy(dir, copy.as_deref())
    }

    /// [`Self::write_to`], with the JSON also written to `copy`.
    fn write_with_copy(
        &self,
        dir: &std::path::Path,
        copy: Option<&std::path::Path>,
    ) -> io::Result<PathBuf> {
        fs::create_dir_all(dir)?;
        let json_path = dir.join(format!("{}.json", self.name));
        let text = serde_json::to_string_pretty(&self.to_json()).map_err(io::Error::other)? + "\n";
        fs::write(&json_path, &text)?;
        if let Some(copy) = copy {
            fs::write(copy, &text)?;
        }
        if !self.charts.is_empty() {
            self.draw(&dir.join(format!("{}.png", self.name)))?;
        }
        Ok(json_path)
    }

    /// Draws the report's charts as one PNG at `path` (no JSON).
    ///
    /// # Errors
    /// When the chart cannot be drawn or written.
    pub fn draw(&self, path: &std::path::Path) -> io::Result<()> {
        let has_font = font_registered();
        let height: u32 = self.charts.iter().map(Chart::height_px).sum();
        let root = BitMapBackend::new(path, (PANEL_WIDTH_PX, height.max(1))).into_drawing_area();
        root.fill(&WHITE).map_err(io::Error::other)?;
        let mut top = 0i32;
        for chart in &self.charts {
            match chart {
                Chart::Bars(bars) => draw_panel(&root, bars, top, has_font),
                Chart::Lines(lines) => {
                    let (_, below) = root.split_vertically(top);
                    let (panel, _) = below.split_vertically(LINES_HEIGHT_PX as i32);
                    draw_lines(&panel, lines, has_font)
                }
            }
            .map_err(io::Error::other)?;
            top += chart.height_px() as i32;
        }
        root.present().map_err(io::Error::other)
    }
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn draw_panel(
    root: &Area<'_>,
    chart: &Bars,
    top: i32,
    has_font: bool,
) -> Result<(), DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>> {
    let label_width = 330i32;
    let bar_room = PANEL_WIDTH_PX as i32 - label_width - 150;
    let max = chart
        .bars
        .iter()
        .map(|(_, value)| *value)
        .fold(0.0f64, f64::max);
    let text = (FONT_FAMILY, 16).into_font().color(&BLACK);
    if has_font {
        let title = format!("{} ({})", chart.title, chart.unit);
        root.draw(&Text::new(
            title,
            (10, top + 20),
            ("sans-serif", 20).into_font(),
        ))?;
    }
    for (index, (label, value)) in chart.bars.iter().enumerate() {
        let y = top + PANEL_HEIGHT_PX as i32 + index as i32 * BAR_HEIGHT_PX as i32 - 10;
        let width = if max > 0.0 {
            (value / max * f64::from(bar_room)) as i32
        } else {
            0
        };
        root.draw(&Rectangle::new(
            [
                (label_width, y),
                (label_width + width.max(1), y + BAR_HEIGHT_PX as i32 - 6),
            ],
            BLUE.mix(0.7).filled(),
        ))?;
        if has_font {
            root.draw(&Text::new(label.clone(), (10, y + 4), text.clone()))?;
            let figure = format!("{value:.1}");
            root.draw(&Text::new(
                figure,
                (label_width + width.max(1) + 8, y + 4),
                text.clone(),
            ))?;
        }
    }
    Ok(())
}

/// Draws `chart` filling `area`: axes from 0 to the largest x and y (with
/// some room above), one coloured line per series, a legend when there is
/// a font.
fn draw_lines(
    area: &Area<'_>,
    chart: &Lines,
    has_font: bool,
) -> Result<(), DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>> {
    let points = || chart.series.iter().flat_map(|(_, points)| points.iter());
    let x_max = points().map(|(x, _)| *x).fold(0.0f64, f64::max).max(1e-9);
    let y_max = points().map(|(_, y)| *y).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let mut builder = ChartBuilder::on(area);
    builder.margin(10);
    if has_font {
        builder
            .caption(&chart.title, (FONT_FAMILY, 20))
            .x_label_area_size(35)
            .y_label_area_size(60);
    }
    let mut plot = builder.build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    if has_font {
        plot.configure_mesh()
            .x_desc(chart.x_unit.as_str())
            .y_desc(chart.y_unit.as_str())
            .label_style((FONT_FAMILY, 14))
            .draw()?;
    } else {
        plot.configure_mesh()
            .disable_x_mesh()
            .disable_y_mesh()
            .draw()?;
    }
    for (index, (name, points)) in chart.series.iter().enumerate() {
        let colour = LINE_COLOURS[index % LINE_COLOURS.len()];
        // A path element rather than a `LineSeries`: the workspace builds
        // plotters without its series features.
        let path = PathElement::new(points.clone(), colour.stroke_width(2));
        let drawn = plot.draw_series(std::iter::once(path))?;
        if has_font {
            drawn
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour));
        }
    }
    if has_font && !chart.series.is_empty() {
        plot.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font((FONT_FAMILY, 14))
            .draw()?;
    }
    Ok(())
}

/// Registers the chart font once; false when it is not installed.
fn font_registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        let Ok(bytes) = fs::read(FONT_PATH) else {
            return false;
        };
        // The font must live as long as the process: plotters keeps a
        // reference to it in a global table.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, bytes).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_holds_every_figure_and_note() {
        let mut report = Report::new("unit");
        report
            .set("a_per_s", 2.5)
            .set("b_p50_us", 7.0)
            .note("backend", "portable");
        let json = report.to_json();
        assert_eq!(json["benchmark"], "unit");
        assert_eq!(json["a_per_s"], 2.5);
        assert_eq!(json["b_p50_us"], 7.0);
        assert_eq!(json["notes"]["backend"], "portable");
    }

    #[test]
    fn a_copy_asked_for_holds_the_same_json_as_the_report_file() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy.json");
        let mut report = Report::new("unit-copy");
        report.set("x", 1.0);
        let written = report
            .write_with_copy(dir.path(), Some(&copy))
            .expect("written");
        let file = std::fs::read_to_string(written).expect("report file");
        assert_eq!(std::fs::read_to_string(&copy).expect("copy"), file);
        let json: serde_json::Value = serde_json::from_str(&file).expect("json");
        assert_eq!(json["x"], 1.0);
    }

    #[test]
    fn write_produces_json_and_png() {
        let dir = tempfile::tempdir().unwrap();
        let mut report = Report::new("unit-write");
        report
            .set("x", 1.0)
            .bars("demo", "us", &[("one", 1.0), ("two", 2.0)]);
        let json_path = report.write_to(dir.path()).unwrap();
        let json: serde_json::Value =
            serde_json::from_slice(&fs::read(json_path).unwrap()).unwrap();
        assert_eq!(json["x"], 1.0);
        let png = fs::read(dir.path().join("unit-write.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }

    #[test]
    fn line_charts_are_drawn_below_bars() {
        let dir = tempfile::tempdir().unwrap();
        let mut report = Report::new("unit-lines");
        report.bars("demo", "us", &[("one", 1.0)]).lines(
            "over time",
            ("minutes", "MiB"),
            &[
                ("rss", vec![(0.0, 10.0), (1.0, 12.0)]),
                ("empty", Vec::new()),
            ],
        );
        report.write_to(dir.path()).unwrap();
        let png = fs::read(dir.path().join("unit-lines.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }
}
