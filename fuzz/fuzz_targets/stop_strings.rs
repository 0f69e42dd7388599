//! The streaming stop-string state: text arriving in arbitrary deltas. Checks what it emits:
//! without a stop, everything, in order; with one, a prefix of the text that ends right before
//! (or, with include_stop_str_in_output, right after) an occurrence of that stop string.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vllm_rs_frontend::StopStrings;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // First line: stop strings separated by \u{1}; first char of the rest: include flag; the rest:
    // deltas separated by \u{2}.
    let Some((stops, rest)) = text.split_once('\n') else { return };
    let stops: Vec<String> = stops.split('\u{1}').filter(|s| !s.is_empty()).map(str::to_string).collect();
    let include = rest.starts_with('1');
    let Ok(mut s) = StopStrings::new(stops.clone(), include) else { return };
    let mut out = String::new();
    let mut full = String::new();
    let mut stopped = None;
    for delta in rest.split('\u{2}') {
        full.push_str(delta);
        let o = s.push(delta);
        out.push_str(&o.text);
        if o.stopped.is_some() {
            stopped = o.stopped;
            break;
        }
    }
    match stopped {
        None => {
            out.push_str(&s.flush());
            assert_eq!(out, full);
        }
        Some(stop) => {
            assert!(stops.contains(&stop));
            if include {
                assert!(out.ends_with(&stop) && full.starts_with(&out), "{out:?} {full:?} {stop:?}");
            } else {
                assert!(full.starts_with(&out) && full[out.len()..].starts_with(&stop), "{out:?} {full:?} {stop:?}");
            }
        }
    }
});
