//! Embedding: row `i` of the output is row `ids[i]` of the table `[V, C]`.
//!
//! A lookup is the product `onehot(ids)·table`, so its gradient is `onehot(ids)ᵀ·dy`: every
//! output row's blame is added into the table row its id selected. A token used three times is
//! blamed three times, which is why the backward pass adds and never assigns. Rows no id selected
//! get exactly zero.

use super::Mat;

/// `table [V, C]`, `ids [n]` → `[n, C]`.
pub fn forward(table: &Mat, ids: &[usize]) -> Mat {
    let mut out = Mat::zeros(ids.len(), table.cols);
    for (i, &id) in ids.iter().enumerate() {
        assert!(
            id < table.rows,
            "embedding: id {id} outside a table of {}",
            table.rows
        );
        out.data[i * table.cols..(i + 1) * table.cols].copy_from_slice(table.row(id));
    }
    out
}

/// Given `dy [n, C]`, the gradient of the table `[vocab, C]`.
pub fn backward(ids: &[usize], dy: &Mat, vocab: usize) -> Mat {
    assert_eq!(ids.len(), dy.rows, "embedding: one id per upstream row");
    let c = dy.cols;
    let mut dtable = Mat::zeros(vocab, c);
    // In order of position, so each table row's sum is formed in the order `onehotᵀ·dy` forms it.
    for (i, &id) in ids.iter().enumerate() {
        for (d, g) in dtable.data[id * c..(id + 1) * c].iter_mut().zip(dy.row(i)) {
            *d += g;
        }
    }
    dtable
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testing::{numerical_grad, randn, worst_rel};

    /// `L = Σ lookup ⊙ dy` is linear in the table, so the centred difference is exact but for
    /// rounding (~1e-13 here); 1e-9 admits nothing else.
    pub(crate) const TOL: f64 = 1e-9;
    const V: usize = 6;
    const C: usize = 4;
    /// Token 4 three times and token 1 twice; tokens 0 and 5 never.
    const IDS: [usize; 7] = [4, 1, 4, 2, 1, 4, 3];

    pub(crate) fn worst(backward: impl Fn(&[usize], &Mat, usize) -> Mat) -> f64 {
        let table = Mat::new(V, C, randn(51, V * C, 3.0));
        let dy = Mat::new(IDS.len(), C, randn(52, IDS.len() * C, 1.0));
        let n = numerical_grad(&table.data, 1e-3, |v| {
            let y = forward(&Mat::new(V, C, v.to_vec()), &IDS);
            y.data.iter().zip(&dy.data).map(|(a, b)| a * b).sum()
        });
        worst_rel(&backward(&IDS, &dy, V).data, &n)
    }

    #[test]
    fn embedding_backward_matches_numerical() {
        let r = worst(backward);
        println!("embedding dtable: worst relative difference {r:.2e}");
        assert!(r <= TOL, "embedding: {r:.3e}");
    }

    #[test]
    fn lookup_and_gradient_equal_the_one_hot_product_exactly() {
        let table = Mat::new(V, C, randn(53, V * C, 3.0));
        let dy = Mat::new(IDS.len(), C, randn(54, IDS.len() * C, 1.0));
        let mut onehot = Mat::zeros(IDS.len(), V);
        for (i, &id) in IDS.iter().enumerate() {
            *onehot.at_mut(i, id) = 1.0;
        }
        // The product adds `0·t` terms, which change nothing, and `1·t`, which is `t`: the same
        // numbers in the same order, so equality is bit for bit, not approximate.
        assert_eq!(forward(&table, &IDS).data, onehot.matmul(&table).data);
        assert_eq!(backward(&IDS, &dy, V).data, onehot.matmul_at_b(&dy).data);
    }
}

#[cfg(test)]
mod burn_parity {
    use super::*;
    use crate::testing::{AB, assert_close, f32_exact, grads_by_path, load, randn, tensor};
    use burn::nn::EmbeddingConfig;
    use burn::prelude::*;

    #[test]
    fn embedding_backward_matches_burn_autodiff() {
        let (v, c) = (6, 5);
        let table = Mat::new(v, c, f32_exact(randn(321, v * c, 2.0)));
        let ids = [3usize, 1, 3, 0, 3, 5]; // 3 three times: its row is blamed three times
        let dy = Mat::new(ids.len(), c, randn(322, ids.len() * c, 1.0));
        let emb = load(
            EmbeddingConfig::new(v, c).init::<AB>(&Default::default()),
            &[("weight", &[v, c], &table.data)],
        );
        let idt = Tensor::<AB, 2, Int>::from_data(
            TensorData::new(ids.iter().map(|&i| i as i64).collect(), [1, ids.len()]),
            &Default::default(),
        );
        let y = emb.forward(idt); // [1, n, C]
        assert_close(
            "y",
            &y.clone().into_data().iter::<f64>().collect::<Vec<_>>(),
            &forward(&table, &ids).data,
            0.0,
        );
        let grads = (y * tensor::<AB, 3>(dy.data.clone(), [1, ids.len(), c]))
            .sum()
            .backward();
        // Additions of the same numbers in the same order: exact.
        assert_close(
            "dtable",
            &grads_by_path(&emb, &grads)["weight"],
            &backward(&ids, &dy, v).data,
            0.0,
        );
    }
}
