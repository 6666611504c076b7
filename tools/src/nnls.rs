//! Non-negative least squares for three unknowns: `min |A x - y|²` subject to `x >= 0`, where
//! `A` has one row `[a_0, a_1, a_2]` per observation. `inferrail calibrate` fits the prefill
//! cost `P(u, c) = a*u + b*u*(c + u/2) + d` with it (rows `[u, u*(c + u/2), 1]`). Pure.
//!
//! # Method: enumerate the supports
//!
//! An NNLS optimum has a *support* `S` (the coefficients that are positive); on `S` it is the
//! unconstrained least-squares solution over the columns in `S` (the gradient vanishes there),
//! and an optimum whose support columns are linearly independent always exists. With three
//! unknowns there are only seven non-empty supports, so [`fit`] solves the unconstrained
//! problem on each (plus the all-zero solution), keeps the ones that come out non-negative and
//! returns the one with the smallest residual. That is exact, needs no iteration count, no
//! tolerance for leaving or entering the active set, and cannot cycle, which the active-set
//! method of Lawson and Hanson has to guard against; its cost (8 small solves) is nothing next
//! to the measurements. Each subproblem is solved by QR (modified Gram-Schmidt) on columns
//! scaled to unit length, never by normal equations: the calibration columns differ by six
//! orders of magnitude and the normal equations would square that conditioning.

/// The number of unknowns.
pub const N: usize = 3;

/// A fitted solution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// The coefficients, each finite and `>= 0`.
    pub x: [f64; N],
    /// The residual sum of squares `|A x - y|²` over the rows used.
    pub rss: f64,
    /// How many rows were used (rows with a non-finite entry are left out).
    pub rows: usize,
}

/// Solves `min |A x - y|²` subject to `x >= 0` (see the module docs). Rows whose entries or
/// target are not finite are ignored; with no usable row the result is all zeros. Never panics;
/// every coefficient of the result is finite and `>= 0`.
pub fn fit(rows: &[[f64; N]], y: &[f64]) -> Fit {
    let data: Vec<([f64; N], f64)> = rows
        .iter()
        .zip(y)
        .filter(|(r, t)| r.iter().all(|v| v.is_finite()) && t.is_finite())
        .map(|(r, t)| (*r, *t))
        .collect();
    let mut best = Fit {
        x: [0.0; N],
        rss: rss(&data, &[0.0; N]),
        rows: data.len(),
    };
    for mask in 1..(1u32 << N) {
        let support: Vec<usize> = (0..N).filter(|i| mask & (1 << i) != 0).collect();
        let Some(x) = solve_support(&data, &support) else {
            continue;
        };
        let r = rss(&data, &x);
        if r.is_finite() && r < best.rss {
            best = Fit {
                x,
                rss: r,
                rows: data.len(),
            };
        }
    }
    best
}

/// The residual sum of squares of `x` on `data`.
pub fn rss(data: &[([f64; N], f64)], x: &[f64; N]) -> f64 {
    data.iter()
        .map(|(r, t)| {
            let e = predict(r, x) - t;
            e * e
        })
        .sum()
}

/// `row · x`.
pub fn predict(row: &[f64; N], x: &[f64; N]) -> f64 {
    row.iter().zip(x).map(|(a, b)| a * b).sum()
}

/// The unconstrained least-squares solution over the columns in `support` (zero elsewhere),
/// or `None` when those columns are (numerically) dependent or the solution has a negative or
/// non-finite coefficient.
fn solve_support(data: &[([f64; N], f64)], support: &[usize]) -> Option<[f64; N]> {
    let k = support.len();
    if data.len() < k {
        return None;
    }
    // Columns of the subproblem, each scaled to unit length.
    let mut cols: Vec<Vec<f64>> = support
        .iter()
        .map(|&j| data.iter().map(|(r, _)| r[j]).collect())
        .collect();
    let mut scale = vec![0.0; k];
    for (c, s) in cols.iter_mut().zip(scale.iter_mut()) {
        *s = norm(c);
        if !(*s > 0.0 && s.is_finite()) {
            return None;
        }
        c.iter_mut().for_each(|v| *v /= *s);
    }
    let (q, r) = gram_schmidt(cols)?;
    let y: Vec<f64> = data.iter().map(|(_, t)| *t).collect();
    let qty: Vec<f64> = q.iter().map(|qi| dot(qi, &y)).collect();
    let z = back_substitute(&r, &qty)?;
    let mut x = [0.0; N];
    for ((&j, zj), s) in support.iter().zip(z).zip(scale) {
        let v = zj / s;
        if !(v.is_finite() && v >= 0.0) {
            return None;
        }
        x[j] = v;
    }
    Some(x)
}

/// Dense columns (or rows) of a small matrix.
type Columns = Vec<Vec<f64>>;

/// Modified Gram-Schmidt (twice, for orthogonality) on unit-length columns: `Q` (orthonormal
/// columns) and upper-triangular `R`; `None` when a column is dependent on the earlier ones.
#[allow(clippy::needless_range_loop)]
fn gram_schmidt(mut cols: Vec<Vec<f64>>) -> Option<(Columns, Columns)> {
    let k = cols.len();
    let mut r = vec![vec![0.0; k]; k];
    for j in 0..k {
        for _pass in 0..2 {
            for i in 0..j {
                let p = dot(&cols[i], &cols[j]);
                r[i][j] += p;
                let (head, tail) = cols.split_at_mut(j);
                tail[0]
                    .iter_mut()
                    .zip(&head[i])
                    .for_each(|(v, qi)| *v -= p * qi);
            }
        }
        let n = norm(&cols[j]);
        // The columns have unit length, so this is the sine of the angle to the span of the
        // earlier ones: below 1e-10 they are dependent for any practical purpose.
        if n.is_nan() || n <= 1e-10 {
            return None;
        }
        r[j][j] = n;
        cols[j].iter_mut().for_each(|v| *v /= n);
    }
    Some((cols, r))
}

/// Solves `R z = b` for upper-triangular `R` with a positive diagonal.
fn back_substitute(r: &[Vec<f64>], b: &[f64]) -> Option<Vec<f64>> {
    let k = b.len();
    let mut z = vec![0.0; k];
    for i in (0..k).rev() {
        let s: f64 = (i + 1..k).map(|j| r[i][j] * z[j]).sum();
        z[i] = (b[i] - s) / r[i][i];
        if !z[i].is_finite() {
            return None;
        }
    }
    Some(z)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f64]) -> f64 {
    // Scaled to avoid overflow for huge entries.
    let m = a.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    if m == 0.0 || !m.is_finite() {
        return m;
    }
    m * a.iter().map(|v| (v / m) * (v / m)).sum::<f64>().sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Calibration rows `[u, u*(c + u/2), 1]` for the given `(u, c)` pairs.
    fn rows_of(points: &[(f64, f64)]) -> Vec<[f64; N]> {
        points
            .iter()
            .map(|&(u, c)| [u, u * (c + u / 2.0), 1.0])
            .collect()
    }

    fn targets(rows: &[[f64; N]], x: &[f64; N]) -> Vec<f64> {
        rows.iter().map(|r| predict(r, x)).collect()
    }

    #[test]
    fn nnls_recovers_the_simulator_defaults() {
        let truth = [1e-4, 3.3e-9, 5e-3];
        let pts: Vec<(f64, f64)> = [16.0, 64.0, 256.0, 1024.0, 2048.0]
            .iter()
            .flat_map(|&u| [0.0, 1024.0, 4096.0].map(|c| (u, c)))
            .collect();
        let rows = rows_of(&pts);
        let f = fit(&rows, &targets(&rows, &truth));
        for (got, want) in f.x.iter().zip(truth) {
            assert!((got - want).abs() <= 1e-9 * want, "{:?}", f.x);
        }
        assert!(f.rss < 1e-20, "{}", f.rss);
        assert_eq!(f.rows, pts.len());
    }

    #[test]
    fn nnls_clamps_a_negative_coefficient_to_zero() {
        // y = 2*x0 - 1 on x0 in 1..=4, with no other useful column: the unconstrained fit
        // wants a negative intercept; NNLS drops it and refits the slope alone.
        let rows: Vec<[f64; N]> = (1..=4).map(|i| [i as f64, 0.0, 1.0]).collect();
        let y: Vec<f64> = (1..=4).map(|i| 2.0 * i as f64 - 1.0).collect();
        let f = fit(&rows, &y);
        assert_eq!(f.x[2], 0.0);
        assert_eq!(f.x[1], 0.0);
        // Least squares through the origin: sum(x*y)/sum(x*x) = 50/30.
        assert!((f.x[0] - 50.0 / 30.0).abs() < 1e-12, "{:?}", f.x);
    }

    #[test]
    fn nnls_degenerate_inputs() {
        assert_eq!(fit(&[], &[]).x, [0.0; N]);
        // All targets negative: zero is the best non-negative answer.
        let rows = rows_of(&[(16.0, 0.0), (32.0, 16.0)]);
        assert_eq!(fit(&rows, &[-1.0, -2.0]).x, [0.0; N]);
        // Collinear columns (every row the same) still give a finite, non-negative answer
        // that fits exactly.
        let rows = vec![[2.0, 4.0, 1.0]; 5];
        let f = fit(&rows, &[3.0; 5]);
        assert!(f.x.iter().all(|v| v.is_finite() && *v >= 0.0));
        assert!(f.rss < 1e-20, "{f:?}");
        // Non-finite rows are ignored.
        let rows = vec![[1.0, 0.0, 0.0], [f64::NAN, 1.0, 1.0], [2.0, 0.0, 0.0]];
        let f = fit(&rows, &[1.0, 5.0, 2.0]);
        assert_eq!(f.rows, 2);
        assert!((f.x[0] - 1.0).abs() < 1e-12);
    }

    /// The KKT conditions of NNLS: gradient `g = Aᵀ(Ax - y)` zero on the support, `>= 0` off it
    /// (within a tolerance scaled to the data).
    fn assert_kkt(rows: &[[f64; N]], y: &[f64], x: &[f64; N]) {
        for j in 0..N {
            let col_norm = norm(&rows.iter().map(|r| r[j]).collect::<Vec<_>>());
            let y_norm = norm(y);
            let g: f64 = rows
                .iter()
                .zip(y)
                .map(|(r, t)| r[j] * (predict(r, x) - t))
                .sum();
            let tol = 1e-7 * col_norm * (y_norm + 1e-300);
            if x[j] > 0.0 {
                assert!(g.abs() <= tol, "g[{j}] = {g} with x = {x:?}");
            } else {
                assert!(g >= -tol, "g[{j}] = {g} with x = {x:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn nnls_noise_free_rows_are_recovered(
            a in 0.0..1e-3f64,
            b in 0.0..1e-7f64,
            d in 0.0..0.1f64,
            zero in 0usize..4,
            pts in proptest::collection::vec((1u32..4096, 0u32..8192), 6..40),
        ) {
            let mut truth = [a, b, d];
            if zero < N {
                truth[zero] = 0.0;
            }
            // Enough distinct sizes for every column to be determined.
            let mut pts: Vec<(f64, f64)> =
                pts.iter().map(|&(u, c)| (u as f64, (c / 16 * 16) as f64)).collect();
            pts.extend([(16.0, 0.0), (2048.0, 0.0), (512.0, 4096.0)]);
            let rows = rows_of(&pts);
            let y = targets(&rows, &truth);
            let f = fit(&rows, &y);
            let y_max = y.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for j in 0..N {
                let col_max = rows.iter().fold(0.0f64, |m, r| m.max(r[j].abs()));
                let tol = 1e-9 * truth[j] + 1e-9 * y_max / col_max;
                prop_assert!(
                    (f.x[j] - truth[j]).abs() <= tol,
                    "x[{}] = {} want {} (fit {:?})", j, f.x[j], truth[j], f.x
                );
            }
        }

        #[test]
        fn nnls_outputs_are_non_negative_and_optimal_for_any_data(
            data in proptest::collection::vec(
                ((-1e3..1e3f64, -1e3..1e3f64, -1e3..1e3f64), -1e3..1e3f64),
                0..20,
            ),
        ) {
            let rows: Vec<[f64; N]> = data.iter().map(|((p, q, r), _)| [*p, *q, *r]).collect();
            let y: Vec<f64> = data.iter().map(|(_, t)| *t).collect();
            let f = fit(&rows, &y);
            prop_assert!(f.x.iter().all(|v| v.is_finite() && *v >= 0.0), "{:?}", f.x);
            prop_assert!(f.rss <= rss(&rows.iter().copied().zip(y.iter().copied()).collect::<Vec<_>>(), &[0.0; N]) + 1e-9);
            assert_kkt(&rows, &y, &f.x);
        }
    }
}
