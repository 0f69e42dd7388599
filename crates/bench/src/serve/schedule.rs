//! When each request is sent: vLLM's `get_request` arrival times (gamma-distributed gaps from numpy's
//! global generator after `np.random.seed(seed)`, exponential = Poisson at burstiness 1, rescaled
//! so the last request arrives at `n / rate`), optionally with a linear or exponential ramp-up.

use super::args::RampUp;
use super::rng::LegacyRandomState;

/// The ramp-up of `--ramp-up-strategy`.
#[derive(Clone, Copy, Debug)]
pub struct Ramp {
    pub strategy: RampUp,
    pub start_rps: f64,
    pub end_rps: f64,
}

/// The request rate for request `i` of `n`.
pub fn current_rate(ramp: Option<&Ramp>, i: usize, n: usize, rate: f64) -> f64 {
    match ramp {
        None => rate,
        Some(r) => {
            let progress = i as f64 / (n.max(2) - 1) as f64;
            match r.strategy {
                RampUp::Linear => r.start_rps + (r.end_rps - r.start_rps) * progress,
                RampUp::Exponential => r.start_rps * (r.end_rps / r.start_rps).powf(progress),
            }
        }
    }
}

/// Seconds from the start at which each of `n` requests is sent, and the rate each was drawn at.
pub fn arrival_times(n: usize, rate: f64, burstiness: f64, ramp: Option<&Ramp>, seed: u32) -> (Vec<f64>, Vec<f64>) {
    let mut rng = LegacyRandomState::new(seed);
    let mut rates = Vec::with_capacity(n);
    let mut delays = Vec::with_capacity(n);
    for i in 0..n {
        let r = current_rate(ramp, i, n, rate);
        rates.push(r);
        let d = if r.is_infinite() {
            0.0
        } else if burstiness.is_infinite() {
            1.0 / r
        } else {
            rng.gamma(burstiness, 1.0 / (r * burstiness))
        };
        delays.push(d);
    }
    for i in 1..n {
        delays[i] += delays[i - 1];
    }
    if ramp.is_none()
        && let Some(&last) = delays.last()
        && last != 0.0
    {
        let factor = (n as f64 / rate) / last;
        for d in &mut delays {
            *d *= factor;
        }
    }
    (delays, rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infinite_rate_sends_everything_at_once() {
        let (d, r) = arrival_times(5, f64::INFINITY, 1.0, None, 0);
        assert_eq!(d, [0.0; 5]);
        assert!(r.iter().all(|x| x.is_infinite()));
    }

    #[test]
    fn poisson_and_gamma_arrivals_as_vllm() {
        // get_request's delay_ts, from numpy 2.3.5: np.random.seed(0); gaps = np.random.gamma(1, 1 / 2)
        // x 4; cumulative; rescaled so the last is n / rate = 2.
        let (d, _) = arrival_times(4, 2.0, 1.0, None, 0);
        assert_eq!(d, [0.42308662643449835, 1.0907390064119973, 1.581524126676757, 1.9999999999999998]);
        // seed 5, rate 3, burstiness 0.5.
        let (d, _) = arrival_times(3, 3.0, 0.5, None, 5);
        assert_eq!(d, [0.14908360769037698, 0.2783578816570993, 1.0]);
        // Constant gaps at infinite burstiness.
        let (d, _) = arrival_times(3, 4.0, f64::INFINITY, None, 0);
        assert_eq!(d, [0.25, 0.5, 0.75]);
    }

    #[test]
    fn ramp_up_rates() {
        let ramp = Ramp { strategy: RampUp::Linear, start_rps: 1.0, end_rps: 5.0 };
        let (d, r) = arrival_times(5, f64::INFINITY, f64::INFINITY, Some(&ramp), 0);
        assert_eq!(r, [1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!((d[4] - (1.0 + 0.5 + 1.0 / 3.0 + 0.25 + 0.2)).abs() < 1e-12, "not rescaled: {d:?}");
        let exp = Ramp { strategy: RampUp::Exponential, start_rps: 1.0, end_rps: 16.0 };
        assert_eq!(current_rate(Some(&exp), 2, 5, 0.0), 4.0);
    }
}
