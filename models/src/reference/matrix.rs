//! A row-major f64 matrix and the three products backpropagation needs: `A·B` forward, `Aᵀ·B` for
//! weight gradients, `A·Bᵀ` for input gradients.

/// A row-major matrix of f64.
#[derive(Clone, Debug, PartialEq)]
pub struct Mat {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f64>,
}

impl Mat {
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Self {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    /// # Panics
    /// If `data.len() != rows * cols`.
    pub fn new(rows: usize, cols: usize, data: Vec<f64>) -> Self {
        assert_eq!(
            data.len(),
            rows * cols,
            "Mat::new: {rows}x{cols} needs {} values",
            rows * cols
        );
        Self { rows, cols, data }
    }

    pub fn at(&self, r: usize, c: usize) -> f64 {
        self.data[r * self.cols + c]
    }

    pub fn at_mut(&mut self, r: usize, c: usize) -> &mut f64 {
        &mut self.data[r * self.cols + c]
    }

    pub fn row(&self, r: usize) -> &[f64] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// `self · other`: `[r, k] · [k, c] -> [r, c]`.
    pub fn matmul(&self, other: &Mat) -> Mat {
        assert_eq!(self.cols, other.rows, "matmul: inner dimensions differ");
        let mut out = Mat::zeros(self.rows, other.cols);
        for i in 0..self.rows {
            for p in 0..self.cols {
                let a = self.at(i, p);
                for j in 0..other.cols {
                    out.data[i * other.cols + j] += a * other.at(p, j);
                }
            }
        }
        out
    }

    /// `selfᵀ · other`: `[k, r]ᵀ · [k, c] -> [r, c]`.
    pub fn matmul_at_b(&self, other: &Mat) -> Mat {
        assert_eq!(self.rows, other.rows, "matmul_at_b: row counts differ");
        let mut out = Mat::zeros(self.cols, other.cols);
        for p in 0..self.rows {
            for i in 0..self.cols {
                let a = self.at(p, i);
                for j in 0..other.cols {
                    out.data[i * other.cols + j] += a * other.at(p, j);
                }
            }
        }
        out
    }

    /// `self · otherᵀ`: `[r, k] · [c, k]ᵀ -> [r, c]`.
    pub fn matmul_a_bt(&self, other: &Mat) -> Mat {
        assert_eq!(self.cols, other.cols, "matmul_a_bt: column counts differ");
        let mut out = Mat::zeros(self.rows, other.rows);
        for i in 0..self.rows {
            for j in 0..other.rows {
                out.data[i * other.rows + j] = self
                    .row(i)
                    .iter()
                    .zip(other.row(j))
                    .map(|(a, b)| a * b)
                    .sum();
            }
        }
        out
    }

    pub fn transpose(&self) -> Mat {
        let mut out = Mat::zeros(self.cols, self.rows);
        for i in 0..self.rows {
            for j in 0..self.cols {
                out.data[j * self.rows + i] = self.at(i, j);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_products_agree_with_explicit_transposes() {
        let a = Mat::new(2, 3, vec![1., 2., 3., 4., 5., 6.]);
        let b = Mat::new(3, 2, vec![7., 8., 9., 10., 11., 12.]);
        assert_eq!(a.matmul(&b).data, vec![58., 64., 139., 154.]);
        let c = Mat::new(2, 2, vec![1., -1., 2., 0.5]);
        assert_eq!(a.matmul_at_b(&c), a.transpose().matmul(&c));
        assert_eq!(a.matmul_a_bt(&a), a.matmul(&a.transpose()));
    }
}
