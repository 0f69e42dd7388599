//! The random number generators `vllm bench serve` draws from, bit for bit, so that the same
//! `--seed` gives the same prompts, lengths and arrival times as vLLM's client:
//!
//! - [`NumpyGenerator`]: numpy's `default_rng(seed)` (PCG64 seeded through `SeedSequence`) and its
//!   `integers(low, high, size)`: the random dataset's lengths, offsets, prefix and filler tokens.
//! - [`LegacyRandomState`]: numpy's global `np.random.seed(seed)` (MT19937) and `np.random.gamma`:
//!   the request inter-arrival times.
//! - [`PyRandom`]: Python's `random.seed(seed)` (MT19937 seeded by array), `shuffle` and `choice`:
//!   the ShareGPT dataset's order and oversampling.
//!
//! Written from the published algorithms (O'Neill's PCG, Matsumoto–Nishimura's MT19937, Lemire's
//! bounded integers, Marsaglia–Tsang gamma) and checked against numpy / CPython outputs in the tests.

/// PCG64's 128-bit LCG multiplier.
const PCG_MULT: u128 = 0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645;

/// numpy's `SeedSequence(entropy).generate_state(n_words, uint32)` for an integer seed
/// (no spawn key, pool size 4).
pub fn seed_sequence_state(seed: u64, n_words: usize) -> Vec<u32> {
    const INIT_A: u32 = 0x43b0_d7e5;
    const MULT_A: u32 = 0x931e_8875;
    const INIT_B: u32 = 0x8b51_f9dd;
    const MULT_B: u32 = 0x58f3_8ded;
    const MIX_MULT_L: u32 = 0xca01_f9dd;
    const MIX_MULT_R: u32 = 0x4973_f715;
    const POOL: usize = 4;
    // The integer as little-endian 32-bit words (0 is one zero word).
    let mut entropy = vec![seed as u32];
    if seed >> 32 != 0 {
        entropy.push((seed >> 32) as u32);
    }
    let mut hash_const = INIT_A;
    let mut hashmix = |mut value: u32| {
        value ^= hash_const;
        hash_const = hash_const.wrapping_mul(MULT_A);
        value = value.wrapping_mul(hash_const);
        value ^ (value >> 16)
    };
    let mix = |x: u32, y: u32| {
        let r = MIX_MULT_L.wrapping_mul(x).wrapping_sub(MIX_MULT_R.wrapping_mul(y));
        r ^ (r >> 16)
    };
    let mut pool = [0u32; POOL];
    for (i, p) in pool.iter_mut().enumerate() {
        *p = hashmix(entropy.get(i).copied().unwrap_or(0));
    }
    for src in 0..POOL {
        for dst in 0..POOL {
            if src != dst {
                let h = hashmix(pool[src]);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    for &e in entropy.iter().skip(POOL) {
        for p in pool.iter_mut() {
            let h = hashmix(e);
            *p = mix(*p, h);
        }
    }
    let mut hash_const = INIT_B;
    (0..n_words)
        .map(|i| {
            let mut v = pool[i % POOL] ^ hash_const;
            hash_const = hash_const.wrapping_mul(MULT_B);
            v = v.wrapping_mul(hash_const);
            v ^ (v >> 16)
        })
        .collect()
}

/// numpy's `np.random.default_rng(seed)`: PCG64 (XSL-RR output) with its 32-bit half buffer.
#[derive(Clone, Debug)]
pub struct NumpyGenerator {
    state: u128,
    inc: u128,
    has_u32: bool,
    u32_buf: u32,
}

impl NumpyGenerator {
    pub fn new(seed: u64) -> Self {
        let w = seed_sequence_state(seed, 8);
        let word = |i: usize| (w[2 * i] as u64 | ((w[2 * i + 1] as u64) << 32)) as u128;
        // pcg64_set_seed takes the high 64 bits first.
        let initstate = (word(0) << 64) | word(1);
        let initseq = (word(2) << 64) | word(3);
        let mut g = NumpyGenerator { state: 0, inc: (initseq << 1) | 1, has_u32: false, u32_buf: 0 };
        g.step();
        g.state = g.state.wrapping_add(initstate);
        g.step();
        g
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let s = self.state;
        let rot = (s >> 122) as u32;
        (((s >> 64) as u64) ^ (s as u64)).rotate_right(rot)
    }

    /// The low half of a fresh 64-bit draw, then its high half.
    pub fn next_u32(&mut self) -> u32 {
        if self.has_u32 {
            self.has_u32 = false;
            return self.u32_buf;
        }
        let v = self.next_u64();
        self.has_u32 = true;
        self.u32_buf = (v >> 32) as u32;
        v as u32
    }

    /// `Generator.integers(low, high, size=n)` (int64, `high` exclusive). Panics if `high <= low`
    /// (numpy raises).
    pub fn integers(&mut self, low: i64, high: i64, n: usize) -> Vec<i64> {
        assert!(high > low, "integers: low >= high");
        let rng = (high - 1).wrapping_sub(low) as u64;
        (0..n).map(|_| low.wrapping_add(self.bounded(rng) as i64)).collect()
    }

    /// A uniform integer in `0..=rng` (Lemire's method, 32-bit when the range fits).
    fn bounded(&mut self, rng: u64) -> u64 {
        if rng == 0 {
            0
        } else if rng < 0xFFFF_FFFF {
            let excl = rng as u32 + 1;
            let mut m = self.next_u32() as u64 * excl as u64;
            let mut leftover = m as u32;
            if leftover < excl {
                let threshold = excl.wrapping_neg() % excl;
                while leftover < threshold {
                    m = self.next_u32() as u64 * excl as u64;
                    leftover = m as u32;
                }
            }
            m >> 32
        } else if rng == 0xFFFF_FFFF {
            self.next_u32() as u64
        } else if rng == u64::MAX {
            self.next_u64()
        } else {
            let excl = rng + 1;
            let mut m = self.next_u64() as u128 * excl as u128;
            let mut leftover = m as u64;
            if leftover < excl {
                let threshold = excl.wrapping_neg() % excl;
                while leftover < threshold {
                    m = self.next_u64() as u128 * excl as u128;
                    leftover = m as u64;
                }
            }
            (m >> 64) as u64
        }
    }
}

/// MT19937 as numpy's legacy `RandomState` and CPython's `random` both use it.
#[derive(Clone)]
struct Mt19937 {
    mt: Box<[u32; 624]>,
    pos: usize,
}

impl Mt19937 {
    /// `init_genrand(seed)`.
    fn from_u32(seed: u32) -> Self {
        let mut mt = Box::new([0u32; 624]);
        mt[0] = seed;
        for i in 1..624 {
            mt[i] = 1_812_433_253u32.wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_add(i as u32);
        }
        Mt19937 { mt, pos: 624 }
    }

    /// `init_by_array(key)`.
    fn from_key(key: &[u32]) -> Self {
        let mut s = Self::from_u32(19_650_218);
        let mt = &mut s.mt;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..624.max(key.len()) {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= 624 {
                mt[0] = mt[623];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..623 {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= 624 {
                mt[0] = mt[623];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        s
    }

    fn next_u32(&mut self) -> u32 {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        const MATRIX_A: u32 = 0x9908_b0df;
        if self.pos >= 624 {
            let mt = &mut self.mt;
            for k in 0..624 {
                let y = (mt[k] & UPPER) | (mt[(k + 1) % 624] & LOWER);
                mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ if y & 1 == 1 { MATRIX_A } else { 0 };
            }
            self.pos = 0;
        }
        let mut y = self.mt[self.pos];
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// A double in [0, 1) with 53 random bits.
    fn next_f64(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }
}

/// numpy's legacy global generator after `np.random.seed(seed)`.
#[derive(Clone)]
pub struct LegacyRandomState {
    mt: Mt19937,
    gauss: Option<f64>,
}

impl LegacyRandomState {
    pub fn new(seed: u32) -> Self {
        LegacyRandomState { mt: Mt19937::from_u32(seed), gauss: None }
    }

    pub fn random(&mut self) -> f64 {
        self.mt.next_f64()
    }

    pub fn standard_exponential(&mut self) -> f64 {
        -(1.0 - self.random()).ln()
    }

    /// `np.random.standard_normal()` (polar Box–Muller, the second value kept for the next call).
    pub fn gauss(&mut self) -> f64 {
        if let Some(g) = self.gauss.take() {
            return g;
        }
        let (x1, x2, r2) = loop {
            let x1 = 2.0 * self.random() - 1.0;
            let x2 = 2.0 * self.random() - 1.0;
            let r2 = x1 * x1 + x2 * x2;
            if r2 < 1.0 && r2 != 0.0 {
                break (x1, x2, r2);
            }
        };
        let f = (-2.0 * r2.ln() / r2).sqrt();
        self.gauss = Some(f * x1);
        f * x2
    }

    pub fn standard_gamma(&mut self, shape: f64) -> f64 {
        if shape == 1.0 {
            self.standard_exponential()
        } else if shape == 0.0 {
            0.0
        } else if shape < 1.0 {
            loop {
                let u = self.random();
                let v = self.standard_exponential();
                if u <= 1.0 - shape {
                    let x = u.powf(1.0 / shape);
                    if x <= v {
                        return x;
                    }
                } else {
                    let y = -((1.0 - u) / shape).ln();
                    let x = (1.0 - shape + shape * y).powf(1.0 / shape);
                    if x <= v + y {
                        return x;
                    }
                }
            }
        } else {
            let b = shape - 1.0 / 3.0;
            let c = 1.0 / (9.0 * b).sqrt();
            loop {
                let (x, mut v) = loop {
                    let x = self.gauss();
                    let v = 1.0 + c * x;
                    if v > 0.0 {
                        break (x, v);
                    }
                };
                v = v * v * v;
                let u = self.random();
                if u < 1.0 - 0.0331 * (x * x) * (x * x) {
                    return b * v;
                }
                if u.ln() < 0.5 * x * x + b * (1.0 - v + v.ln()) {
                    return b * v;
                }
            }
        }
    }

    /// `np.random.gamma(shape, scale)`.
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        scale * self.standard_gamma(shape)
    }
}

/// CPython's `random.Random` after `random.seed(seed)` with an integer seed.
#[derive(Clone)]
pub struct PyRandom {
    mt: Mt19937,
}

impl PyRandom {
    pub fn new(seed: u64) -> Self {
        // The absolute value as 32-bit words, least significant first (0 is one zero word).
        let mut key = vec![seed as u32];
        if seed >> 32 != 0 {
            key.push((seed >> 32) as u32);
        }
        PyRandom { mt: Mt19937::from_key(&key) }
    }

    /// `getrandbits(k)` for `1 <= k <= 32`.
    fn getrandbits(&mut self, k: u32) -> u32 {
        debug_assert!((1..=32).contains(&k));
        self.mt.next_u32() >> (32 - k)
    }

    /// `_randbelow(n)`: a uniform integer in `0..n` by rejection on `n.bit_length()` bits.
    pub fn randbelow(&mut self, n: u32) -> u32 {
        assert!(n > 0, "randbelow(0)");
        let k = 32 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }

    /// `random.shuffle(x)` (Fisher–Yates from the end).
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        for i in (1..x.len()).rev() {
            let j = self.randbelow(i as u32 + 1) as usize;
            x.swap(i, j);
        }
    }

    /// `random.choice(seq)` as an index.
    pub fn choice_index(&mut self, len: usize) -> usize {
        self.randbelow(len as u32) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goldens printed by numpy 2.3.5 / CPython 3.11 (vLLM 0.32's venv):
    //   np.random.SeedSequence(s).generate_state(4)
    //   np.random.default_rng(s).integers(lo, hi, size=n)
    //   np.random.seed(s); np.random.gamma(shape, scale, size=n)
    //   random.seed(s); x = list(range(n)); random.shuffle(x); [random.choice(x) ...]

    #[test]
    fn seed_sequence_matches_numpy() {
        assert_eq!(seed_sequence_state(0, 4), [2968811710, 3677149159, 745650761, 2884920346]);
        assert_eq!(seed_sequence_state(12345, 4), [2688385916, 3048105090, 4196366895, 3152189807]);
        assert_eq!(seed_sequence_state((1 << 40) + 7, 4), [238885397, 226915041, 1322230113, 2599373530]);
    }

    #[test]
    fn pcg64_matches_numpy() {
        let mut g = NumpyGenerator::new(0);
        let raw: Vec<u64> = (0..3).map(|_| g.next_u64()).collect();
        assert_eq!(raw, [11749869230777074271, 4976686463289251617, 755828109848996024]);
    }

    #[test]
    fn integers_match_numpy_across_calls() {
        // One generator through several calls: the 32-bit half buffer carries over between them.
        let mut g = NumpyGenerator::new(0);
        assert_eq!(g.integers(0, 49152, 5), [41809, 31307, 25123, 13260, 15130]);
        assert_eq!(g.integers(96, 161, 3), [98, 100, 97]);
        assert_eq!(g.integers(5, 6, 3), [5, 5, 5]);
        assert_eq!(g.integers(0, 1 << 40, 2), [894200084524, 1003585370534]);
        assert_eq!(g.integers(0, 7, 4), [3, 4, 6, 5]);
        let mut g = NumpyGenerator::new(42);
        assert_eq!(g.integers(0, 151936, 6), [13560, 117591, 99452, 66681, 65790, 130451]);
    }

    fn assert_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-15 * w.abs().max(1.0), "{got:?} != {want:?}");
        }
    }

    #[test]
    fn legacy_gamma_matches_numpy() {
        let mut r = LegacyRandomState::new(0);
        let got: Vec<f64> = (0..4).map(|_| r.gamma(1.0, 0.5)).collect();
        assert_close(&got, &[0.397937254081555, 0.6279653814829189, 0.4616115729020344, 0.39360057615863536]);
        let mut r = LegacyRandomState::new(3);
        let got: Vec<f64> = (0..4).map(|_| r.gamma(0.5, 2.0)).collect();
        assert_close(&got, &[0.6128741825394206, 0.1692511342440166, 3.229061251792075, 0.03154334040859628]);
        let mut r = LegacyRandomState::new(3);
        let got: Vec<f64> = (0..5).map(|_| r.gamma(2.0, 0.25)).collect();
        assert_close(
            &got,
            &[1.301583808791602, 0.5740245516278103, 0.3333989481020006, 0.3123363035696161, 0.40268381268943776],
        );
    }

    #[test]
    fn python_random_matches_cpython() {
        let mut r = PyRandom::new(0);
        let mut x: Vec<u32> = (0..10).collect();
        r.shuffle(&mut x);
        assert_eq!(x, [7, 8, 1, 5, 3, 4, 2, 0, 9, 6]);
        let picks: Vec<u32> = (0..5).map(|_| x[r.choice_index(x.len())]).collect();
        assert_eq!(picks, [4, 6, 5, 9, 1]);
        let mut r = PyRandom::new((1 << 33) + 5);
        let mut x: Vec<u32> = (0..7).collect();
        r.shuffle(&mut x);
        assert_eq!(x, [0, 3, 4, 6, 1, 2, 5]);
    }
}
