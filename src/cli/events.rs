//! `car events export` and `car events verify`: the audit log `car run` and
//! `car-server` append to (`events.jsonl` under `$CAR_HOME`).

use std::io::Write;
use std::path::{Path, PathBuf};

use car_runtime::store::file::{self, EVENTS_FILE, FileReport};

use super::{CliError, CliResult};

/// The state directory: `--dir`, else `$CAR_HOME` (absolute), else `~/.car`.
pub fn state_dir(dir: Option<&Path>) -> Result<PathBuf, CliError> {
    if let Some(d) = dir {
        return Ok(d.to_path_buf());
    }
    if let Some(home) = std::env::var_os("CAR_HOME").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(home);
        if !p.is_absolute() {
            return Err(CliError::Input(format!("CAR_HOME must be an absolute path, got `{}`", p.display())));
        }
        return Ok(p);
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".car")),
        None => Err(CliError::Input("neither CAR_HOME nor HOME is set; pass --dir".into())),
    }
}

fn report_torn(report: &FileReport, shown: &Path) {
    if let Some(t) = &report.torn {
        eprintln!(
            "warning: {}: line {} is a torn record ({} bytes, a write cut short): skipped",
            shown.display(),
            t.line,
            t.bytes
        );
    }
}

fn report_broken(report: &FileReport, shown: &Path) -> bool {
    match (report.tampered_at, &report.problem) {
        (Some(line), Some(why)) => {
            eprintln!("error: {}: the chain breaks at line {line}: {why}", shown.display());
            true
        }
        _ => false,
    }
}

/// `car events export [--dir DIR] [--out FILE]`.
pub fn export(dir: Option<&Path>, out: Option<&Path>) -> CliResult {
    let path = state_dir(dir)?.join(EVENTS_FILE);
    if !path.is_file() {
        return Err(CliError::Input(format!("no event log at `{}`", path.display())));
    }
    let report = match out {
        Some(o) => {
            let mut f = std::fs::File::create(o).map_err(|e| CliError::Input(format!("--out {}: {e}", o.display())))?;
            let r = file::export(&path, &mut f).map_err(|e| CliError::Runtime(e.to_string()))?;
            f.sync_all().map_err(|e| CliError::Runtime(format!("--out {}: {e}", o.display())))?;
            r
        }
        None => {
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            let r = file::export(&path, &mut lock).map_err(|e| CliError::Runtime(e.to_string()))?;
            lock.flush().map_err(|e| CliError::Runtime(e.to_string()))?;
            r
        }
    };
    report_torn(&report, &path);
    if report_broken(&report, &path) {
        eprintln!("exported the {} records before it", report.records);
        return Ok(1);
    }
    eprintln!("exported {} records from {}", report.records, path.display());
    Ok(0)
}

/// `car events verify FILE [--json]`.
pub fn verify(path: &Path, json: bool) -> CliResult {
    let report = file::verify_file(path).map_err(|e| CliError::Input(e.to_string()))?;
    if json {
        println!("{}", report.to_json());
    } else {
        report_torn(&report, path);
        if !report_broken(&report, path) {
            println!("verified: {} records, chain intact", report.records);
        }
    }
    Ok(if report.intact() { 0 } else { 1 })
}
