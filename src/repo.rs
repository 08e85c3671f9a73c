//! Which git repository a directory belongs to, found without running `git` (every `corral`
//! invocation records its repository, so this is on the hot path of `corral run`).

use std::path::{Path, PathBuf};

/// The canonical top-level directory of the git work tree containing `dir`: the nearest
/// ancestor (itself included) holding a `.git` directory or file (worktrees, submodules).
pub fn toplevel(dir: &Path) -> Option<PathBuf> {
    let dir = dir.canonicalize().ok()?;
    dir.ancestors()
        .find(|candidate| candidate.join(".git").exists())
        .map(Path::to_path_buf)
}

/// [`toplevel`] as the text the ledger stores.
pub fn toplevel_text(dir: &Path) -> Option<String> {
    toplevel(dir).map(|path| path.to_string_lossy().into_owned())
}
