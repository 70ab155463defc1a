//! Pictures of what the models drew: grids of images as PNG, and clips as animated GIF.

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
    make_parent(path)?;
    let tmp = path.with_extension("partial.png");
    img.save(&tmp)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn make_parent(path: &Path) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok(())
}

/// Clips as one animated GIF: the clips laid out `cols` to a row, all playing together, looping.
/// `clips[k][f]` is frame `f` of clip `k`, `side × side` values in 0..1 (clamped); every clip has
/// the same number of frames. `delay_ms` is each frame's time on screen.
pub fn clips_gif(
    clips: &[Vec<Vec<f32>>],
    cols: usize,
    side: usize,
    zoom: usize,
    delay_ms: u32,
    path: &Path,
) -> Result<(), String> {
    use image::codecs::gif::{GifEncoder, Repeat};
    use image::{Delay, Frame, Rgba, RgbaImage};
    let frames = clips.first().map_or(0, |c| c.len());
    assert!(
        cols > 0 && clips.iter().all(|c| c.len() == frames),
        "gif: clips of equal length"
    );
    let rows = clips.len().div_ceil(cols);
    let cell = side * zoom + 1;
    let (w, h) = ((cols * cell + 1) as u32, (rows * cell + 1) as u32);
    make_parent(path)?;
    let tmp = path.with_extension("partial.gif");
    let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut enc = GifEncoder::new_with_speed(std::io::BufWriter::new(file), 10);
    enc.set_repeat(Repeat::Infinite)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for f in 0..frames {
        let mut img = RgbaImage::from_pixel(w, h, Rgba([96, 96, 96, 255]));
        for (k, clip) in clips.iter().enumerate() {
            let (r, c) = (k / cols, k % cols);
            for y in 0..side * zoom {
                for x in 0..side * zoom {
                    let v = clip[f][(y / zoom) * side + x / zoom].clamp(0.0, 1.0);
                    let g = (v * 255.0).round() as u8;
                    img.put_pixel(
                        (c * cell + 1 + x) as u32,
                        (r * cell + 1 + y) as u32,
                        Rgba([g, g, g, 255]),
                    );
                }
            }
        }
        let frame = Frame::from_parts(img, 0, 0, Delay::from_numer_denom_ms(delay_ms, 1));
        enc.encode_frame(frame)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    drop(enc);
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gif_has_every_frame_and_the_pixels_drawn() {
        use image::AnimationDecoder;
        use image::codecs::gif::GifDecoder;
        let side = 4;
        let clip = |k: usize| -> Vec<Vec<f32>> {
            (0..3)
                .map(|f| {
                    (0..side * side)
                        .map(|p| if p == f + k { 1.0 } else { 0.0 })
                        .collect()
                })
                .collect()
        };
        let path = std::env::temp_dir().join(format!("nervus-gif-{}.gif", std::process::id()));
        clips_gif(&[clip(0), clip(5)], 2, side, 2, 125, &path).expect("gif");
        let dec = GifDecoder::new(std::io::BufReader::new(
            std::fs::File::open(&path).expect("open"),
        ))
        .expect("decode");
        let frames: Vec<_> = dec.into_frames().collect::<Result<_, _>>().expect("frames");
        assert_eq!(frames.len(), 3);
        // Frame 2 of clip 0 lights pixel 2 (row 0, column 2): zoom 2, one-pixel border.
        let img = frames[2].buffer();
        assert_eq!(
            img.dimensions(),
            (2 * (side as u32 * 2 + 1) + 1, side as u32 * 2 + 2)
        );
        assert_eq!(img.get_pixel(1 + 4, 1)[0], 255);
        assert_eq!(img.get_pixel(1, 1)[0], 0);
        let _ = std::fs::remove_file(&path);
    }
}
