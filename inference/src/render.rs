//! Pictures of what the models drew: grids of images as PNG.

use std::path::Path;

/// A grid of grey images, `rows × cols`, each `side × side` with values in 0..1 (clamped), scaled
/// by `zoom` and separated by a one-pixel gap of mid grey. `images` is row after row.
pub fn grid_png(
    images: &[Vec<f32>],
    rows: usize,
    cols: usize,
    side: usize,
    zoom: usize,
    path: &Path,
) -> Result<(), String> {
    assert_eq!(
        images.len(),
        rows * cols,
        "grid: {rows}×{cols} needs {} images",
        rows * cols
    );
    let cell = side * zoom + 1;
    let (w, h) = (cols * cell + 1, rows * cell + 1);
    let mut img = image::GrayImage::from_pixel(w as u32, h as u32, image::Luma([96]));
    for (k, pix) in images.iter().enumerate() {
        let (r, c) = (k / cols, k % cols);
        for y in 0..side * zoom {
            for x in 0..side * zoom {
                let v = pix[(y / zoom) * side + x / zoom].clamp(0.0, 1.0);
                img.put_pixel(
                    (c * cell + 1 + x) as u32,
                    (r * cell + 1 + y) as u32,
                    image::Luma([(v * 255.0).round() as u8]),
                );
            }
        }
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("partial.png");
    img.save(&tmp)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}
