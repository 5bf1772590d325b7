//! Medians and spreads of repeated measurements.

/// Summary of repeated measurements of one quantity.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Summary {
    /// `None` when there are no values.
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[v.len() - 1],
        })
    }

    /// `median (min–max)` with `unit` and the given precision.
    pub fn show(&self, unit: &str, precision: usize) -> String {
        format!(
            "{:.p$}{unit} ({:.p$}–{:.p$})",
            self.median,
            self.min,
            self.max,
            p = precision
        )
    }
}

/// Ratio of two medians, `None` when the denominator is 0.
pub fn ratio(num: Option<Summary>, den: Option<Summary>) -> Option<f64> {
    let (num, den) = (num?, den?);
    (den.median != 0.0).then(|| num.median / den.median)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!(Summary::of(&[]).is_none());
        assert_eq!(ratio(Summary::of(&[2.0]), Summary::of(&[4.0])), Some(0.5));
        assert_eq!(ratio(Summary::of(&[2.0]), Summary::of(&[0.0])), None);
    }
}
