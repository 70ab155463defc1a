//! Data loaders for Burn's learner whose batches are a pure function of (epoch, index).
//!
//! Burn's `DataLoader` is a trait the learner calls `iter()` on once per epoch; this one asks a
//! [`BatchSource`] for each batch by its position. Because nothing else decides what a batch holds,
//! a run resumed at epoch `e` sees exactly the batches an uninterrupted run would have seen, and
//! two runs with different evaluation intervals train on the same data.

use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::prelude::Backend;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Makes batches by position.
/// Splits `steps` optimizer steps into Burn "epochs" of `every` steps (the last one shorter when
/// `every` does not divide `steps`), so that validation and checkpoints run every `every` steps.
pub fn epoch_lengths(steps: usize, every: usize) -> Vec<usize> {
    let every = every.clamp(1, steps.max(1));
    let mut epochs = vec![every; steps / every];
    if !steps.is_multiple_of(every) {
        epochs.push(steps % every);
    }
    epochs
}

/// Batches in 1-based `epoch` of a run split as `epochs` (0 past the end).
pub fn batches_in(epochs: &[usize], epoch: usize) -> usize {
    epochs.get(epoch.saturating_sub(1)).copied().unwrap_or(0)
}

/// The run-wide, 0-based number of batch `index` of 1-based `epoch`: what a source draws batch
/// contents from, so that a batch does not depend on how the run was cut into epochs or resumed.
pub fn run_index(epochs: &[usize], epoch: usize, index: usize) -> usize {
    epochs[..epoch.saturating_sub(1)].iter().sum::<usize>() + index
}

pub trait BatchSource<B: Backend>: Send + Sync {
    type Batch: Send;

    /// Batches in `epoch` (1-based).
    fn batches(&self, epoch: usize) -> usize;

    /// Items in a batch (for progress reports and rates).
    fn items_per_batch(&self) -> usize;

    /// The `index`-th batch (0-based) of `epoch` (1-based, as Burn's learner counts), on `device`.
    fn batch(&self, epoch: usize, index: usize, device: &B::Device) -> Self::Batch;
}

/// The epoch the learner is in, shared between the training strategy (which sets it) and the
/// loaders (which read it when the learner asks for an iterator).
#[derive(Clone, Debug, Default)]
pub struct EpochCursor(Arc<AtomicUsize>);

impl EpochCursor {
    pub fn set(&self, epoch: usize) {
        self.0.store(epoch, Ordering::SeqCst);
    }

    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A [`DataLoader`] over a [`BatchSource`].
pub struct SourceLoader<B: Backend, S> {
    source: Arc<S>,
    cursor: EpochCursor,
    device: B::Device,
    /// A slice of each epoch's batches, as fractions (Burn's multi-device strategy slices).
    range: (usize, usize),
}

impl<B: Backend, S: BatchSource<B>> SourceLoader<B, S> {
    pub fn new(source: S, cursor: EpochCursor, device: B::Device) -> Self {
        Self {
            source: Arc::new(source),
            cursor,
            device,
            range: (0, usize::MAX),
        }
    }

    fn bounds(&self, epoch: usize) -> (usize, usize) {
        let n = self.source.batches(epoch);
        (self.range.0.min(n), self.range.1.min(n))
    }

    pub fn source(&self) -> &S {
        &self.source
    }
}

struct SourceIter<'a, B: Backend, S> {
    loader: &'a SourceLoader<B, S>,
    epoch: usize,
    next: usize,
}

impl<B: Backend, S: BatchSource<B>> Iterator for SourceIter<'_, B, S> {
    type Item = S::Batch;

    fn next(&mut self) -> Option<S::Batch> {
        let (start, end) = self.loader.bounds(self.epoch);
        if start + self.next >= end {
            return None;
        }
        let b = self
            .loader
            .source
            .batch(self.epoch, start + self.next, &self.loader.device);
        self.next += 1;
        Some(b)
    }
}

impl<B: Backend, S: BatchSource<B>> DataLoaderIterator<S::Batch> for SourceIter<'_, B, S> {
    fn progress(&self) -> Progress {
        let (start, end) = self.loader.bounds(self.epoch);
        let per = self.loader.source.items_per_batch();
        Progress::new(self.next * per, (end - start) * per)
    }
}

impl<B: Backend, S: BatchSource<B> + 'static> DataLoader<B, S::Batch> for SourceLoader<B, S> {
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<S::Batch> + 'a> {
        Box::new(SourceIter {
            loader: self,
            epoch: self.cursor.get().max(1),
            next: 0,
        })
    }

    fn num_items(&self) -> usize {
        let (start, end) = self.bounds(self.cursor.get().max(1));
        (end - start) * self.source.items_per_batch()
    }

    fn to_device(&self, device: &B::Device) -> Arc<dyn DataLoader<B, S::Batch>> {
        Arc::new(Self {
            source: self.source.clone(),
            cursor: self.cursor.clone(),
            device: device.clone(),
            range: self.range,
        })
    }

    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<B, S::Batch>> {
        let (s, e) = self.range;
        Arc::new(Self {
            source: self.source.clone(),
            cursor: self.cursor.clone(),
            device: self.device.clone(),
            range: ((s + start).min(e), (s + end).min(e)),
        })
    }
}

#[cfg(test)]
mod epoch_tests {
    use super::epoch_lengths;

    #[test]
    fn epochs_cover_exactly_the_steps() {
        assert_eq!(epoch_lengths(10, 4), vec![4, 4, 2]);
        assert_eq!(epoch_lengths(8, 4), vec![4, 4]);
        assert_eq!(epoch_lengths(3, 100), vec![3]);
        assert_eq!(epoch_lengths(5, 0), vec![1, 1, 1, 1, 1]);
        assert!(epoch_lengths(0, 4).is_empty());
    }
}
