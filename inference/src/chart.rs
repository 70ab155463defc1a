//! Line charts for the experiment tables: one line per series (the mean over seeds), with the
//! seeds' range drawn as a band around it, so that a difference and its noise are seen together.

use plotters::prelude::*;
use std::path::Path;

/// One line: points `(x, mean)` and, optionally, the band `(x, min, max)` around it.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub band: Vec<(f64, f64, f64)>,
}

/// Axis and title text.
#[derive(Clone, Debug, Default)]
pub struct ChartText {
    pub title: String,
    pub x: String,
    pub y: String,
    /// Logarithmic x axis (learning rates).
    pub log_x: bool,
}

/// Writes a PNG line chart.
pub fn line_chart(path: &Path, text: &ChartText, series: &[Series]) -> Result<(), String> {
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| {
            s.points
                .iter()
                .cloned()
                .chain(s.band.iter().flat_map(|b| [(b.0, b.1), (b.0, b.2)]))
        })
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    if all.is_empty() {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let (x0, x1) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, p| {
        (a.0.min(p.0), a.1.max(p.0))
    });
    let (y0, y1) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, p| {
        (a.0.min(p.1), a.1.max(p.1))
    });
    let pad = ((y1 - y0) * 0.05).max(1e-9);
    let (y0, y1) = (y0 - pad, y1 + pad);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let colours = [
        BLUE,
        RED,
        GREEN,
        MAGENTA,
        CYAN,
        BLACK,
        RGBColor(255, 140, 0),
        RGBColor(128, 0, 128),
    ];
    macro_rules! draw {
        ($chart:expr, $map:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(text.x.as_str())
                .y_desc(text.y.as_str())
                .draw()
                .map_err(|e| err(&e))?;
            for (i, s) in series.iter().enumerate() {
                let c = colours[i % colours.len()];
                if !s.band.is_empty() {
                    let mut poly: Vec<(f64, f64)> =
                        s.band.iter().map(|b| ($map(b.0), b.2)).collect();
                    poly.extend(s.band.iter().rev().map(|b| ($map(b.0), b.1)));
                    chart
                        .draw_series(std::iter::once(Polygon::new(poly, c.mix(0.15).filled())))
                        .map_err(|e| err(&e))?;
                }
                chart
                    .draw_series(LineSeries::new(
                        s.points.iter().map(|p| ($map(p.0), p.1)),
                        c.stroke_width(2),
                    ))
                    .map_err(|e| err(&e))?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                chart
                    .draw_series(
                        s.points
                            .iter()
                            .map(|p| Circle::new(($map(p.0), p.1), 3, c.filled())),
                    )
                    .map_err(|e| err(&e))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }};
    }
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(text.title.as_str(), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    if text.log_x {
        let c = builder
            .build_cartesian_2d((x0 * 0.9..x1 * 1.1).log_scale(), y0..y1)
            .map_err(|e| err(&e))?;
        draw!(c, |x: f64| x);
    } else {
        let c = builder
            .build_cartesian_2d(x0..x1.max(x0 + 1e-9), y0..y1)
            .map_err(|e| err(&e))?;
        draw!(c, |x: f64| x);
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
