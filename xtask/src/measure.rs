//! What the benchmarks share: the threads they run on and the spread of paired ratios.

pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The lowest and highest round-by-round ratio of `a` to `b`.
pub(crate) fn spread(a: &[f64], b: &[f64]) -> (f64, f64) {
    a.iter()
        .zip(b)
        .map(|(x, y)| x / y)
        .fold((f64::INFINITY, 0f64), |(l, h), v| (l.min(v), h.max(v)))
}
