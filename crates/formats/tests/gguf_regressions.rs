//! The crafted GGUF files under `fuzz/regressions/gguf/` (sizes and offsets that overflow or
//! wrap, counts far past the file, zero and too many dimensions, rows that are not whole
//! quantized blocks, …) are refused with an error
//! or, where the file is valid, every tensor reads back — never a panic. The fuzz targets replay
//! the same files under libFuzzer; this replays them in every `cargo test`.

use std::path::Path;
use vllm_rs_formats::gguf::GgufFile;

#[test]
fn crafted_gguf_files_are_errors_not_crashes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/gguf");
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("regression files").map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 10, "regression files missing in {}", dir.display());
    let mut refused = 0;
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy();
        let result = std::panic::catch_unwind(|| match GgufFile::open(f) {
            Ok(g) => {
                for t in g.tensors.keys() {
                    let w = g.weight(t).expect("listed tensor");
                    let _ = w.to_f32();
                }
                false
            }
            Err(e) => {
                assert!(e.to_string().contains(&*name), "{name}: the error names the file: {e}");
                true
            }
        });
        refused += usize::from(result.unwrap_or_else(|_| panic!("{name}: panicked instead of an error")));
    }
    assert!(refused >= files.len() - 2, "only {refused} of {} crafted files were refused", files.len());
}
