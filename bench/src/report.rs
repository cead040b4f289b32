//! A benchmark report: named figures written as JSON, and bar charts written
//! as one PNG.

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

/// Size of one chart panel in pixels.
const PANEL_WIDTH_PX: u32 = 1000;
const PANEL_HEIGHT_PX: u32 = 60;
const BAR_HEIGHT_PX: u32 = 28;

/// One bar chart: a title, the unit of its values, and labelled bars.
#[derive(Debug, Clone)]
struct Bars {
    title: String,
    unit: String,
    bars: Vec<(String, f64)>,
}

/// Figures of one benchmark run.
#[derive(Debug, Clone)]
pub struct Report {
    name: String,
    values: BTreeMap<String, f64>,
    notes: BTreeMap<String, String>,
    charts: Vec<Bars>,
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
        self.charts.push(Bars {
            title: title.to_string(),
            unit: unit.to_string(),
            bars: bars
                .iter()
                .map(|(label, value)| (label.to_string(), *value))
                .collect(),
        });
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
        fs::create_dir_all(dir)?;
        let json_path = dir.join(format!("{}.json", self.name));
        let text = serde_json::to_string_pretty(&self.to_json()).map_err(io::Error::other)?;
        fs::write(&json_path, text + "\n")?;
        if !self.charts.is_empty() {
            self.draw(&dir.join(format!("{}.png", self.name)))?;
        }
        Ok(json_path)
    }

    /// Draws the report's bar charts as one PNG at `path` (no JSON).
    ///
    /// # Errors
    /// When the chart cannot be drawn or written.
    pub fn draw(&self, path: &std::path::Path) -> io::Result<()> {
        let has_font = font_registered();
        let height: u32 = self
            .charts
            .iter()
            .map(|chart| PANEL_HEIGHT_PX + BAR_HEIGHT_PX * chart.bars.len() as u32)
            .sum();
        let root = BitMapBackend::new(path, (PANEL_WIDTH_PX, height.max(1))).into_drawing_area();
        root.fill(&WHITE).map_err(io::Error::other)?;
        let mut top = 0i32;
        for chart in &self.charts {
            draw_panel(&root, chart, top, has_font).map_err(io::Error::other)?;
            top += (PANEL_HEIGHT_PX + BAR_HEIGHT_PX * chart.bars.len() as u32) as i32;
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
}
