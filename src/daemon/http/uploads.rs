//! Images a browser uploads with a prompt: `prompt.send` takes image *paths* on this machine
//! (the socket's clients are local programs), a page has only the files' bytes. So the
//! prompts route also takes an image as `{"name": "shot.png", "media_type": "image/png",
//! "data": "<base64>"}`: each is checked (a known image type whose bytes say so, at most
//! [`MAX_IMAGE`]), written to `HOME/uploads/` (0700; each file 0600, named by a fresh id) and
//! replaced by its path before the method runs. The files stay: a queued prompt, and a retry,
//! read them later (they go with the home).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value;

use crate::protocol::{code, RpcError};

/// The directory of uploads in the home.
pub const UPLOADS_DIR: &str = "uploads";

/// The largest image taken, in bytes (decoded).
pub const MAX_IMAGE: usize = 10 << 20;

/// The types taken, their file extension and the bytes such a file begins with.
const TYPES: &[(&str, &str, &[u8])] = &[
    ("image/png", "png", b"\x89PNG\r\n\x1a\n"),
    ("image/jpeg", "jpg", b"\xff\xd8\xff"),
    ("image/gif", "gif", b"GIF8"),
    ("image/webp", "webp", b"RIFF"),
];

fn invalid(index: usize, why: impl std::fmt::Display) -> RpcError {
    RpcError::new(code::INVALID_PARAMS, format!("images[{index}]: {why}"))
}

/// One uploaded image, checked and decoded: its extension and bytes.
fn decode(
    index: usize,
    image: &serde_json::Map<String, Value>,
) -> Result<(&'static str, Vec<u8>), RpcError> {
    let text = |name: &str| match image.get(name) {
        Some(Value::String(text)) => Ok(text.as_str()),
        None | Some(Value::Null) => Err(invalid(index, format!("{name} is required"))),
        Some(_) => Err(invalid(index, format!("{name} must be a string"))),
    };
    let media_type = text("media_type")?;
    let (_, extension, magic) = TYPES
        .iter()
        .find(|(known, _, _)| *known == media_type)
        .ok_or_else(|| {
            let known: Vec<&str> = TYPES.iter().map(|(known, _, _)| *known).collect();
            invalid(
                index,
                format!(
                    "media_type must be one of {}, not '{}'",
                    known.join(", "),
                    media_type.chars().take(80).collect::<String>()
                ),
            )
        })?;
    let data = text("data")?;
    if data.len() > MAX_IMAGE / 3 * 4 + 4 {
        return Err(invalid(index, format!("larger than {MAX_IMAGE} bytes")));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|error| invalid(index, format!("data is not base64: {error}")))?;
    if bytes.len() > MAX_IMAGE {
        return Err(invalid(index, format!("larger than {MAX_IMAGE} bytes")));
    }
    if !bytes.starts_with(magic) {
        return Err(invalid(
            index,
            format!("the data is not a {media_type} image"),
        ));
    }
    Ok((extension, bytes))
}

/// Makes `dir` if it is not there, and checks the one there: a directory of ours, never a
/// symbolic link (it would send the uploads elsewhere), private (a looser mode is made 0700).
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let refused = |why: String| {
        std::io::Error::other(format!(
            "{} is not corral's uploads directory ({why}); remove it",
            dir.display()
        ))
    };
    let metadata = match std::fs::symlink_metadata(dir) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().mode(0o700).create(dir)?;
            std::fs::symlink_metadata(dir)?
        }
        other => other?,
    };
    if metadata.file_type().is_symlink() {
        return Err(refused("it is a symbolic link".into()));
    }
    if !metadata.is_dir() {
        return Err(refused("it is not a directory".into()));
    }
    let uid = nix::unistd::geteuid().as_raw();
    if metadata.uid() != uid {
        return Err(refused(format!("it belongs to uid {}", metadata.uid())));
    }
    if metadata.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Writes `bytes` as a new private file in `dir`.
fn write_new(dir: &Path, extension: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    private_dir(dir)?;
    let path = dir.join(format!("{}.{extension}", uuid::Uuid::now_v7()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(path)
}

/// Replaces each uploaded image of `params.images` by the path it is written to; paths given
/// as strings stay as they are. The files written, to remove if the prompt is refused.
pub fn store(home: &Path, params: &mut Value) -> Result<Vec<PathBuf>, RpcError> {
    let Some(Value::Array(images)) = params.get_mut("images") else {
        return Ok(Vec::new());
    };
    // Every image is checked before any is written.
    let mut decoded = Vec::new();
    for (index, image) in images.iter().enumerate() {
        if let Value::Object(image) = image {
            decoded.push((index, decode(index, image)?));
        }
    }
    let dir = home.join(UPLOADS_DIR);
    let mut written = Vec::new();
    for (index, (extension, bytes)) in decoded {
        match write_new(&dir, extension, &bytes) {
            Ok(path) => {
                images[index] = Value::String(path.to_string_lossy().into_owned());
                written.push(path);
            }
            Err(error) => {
                remove(&written);
                return Err(RpcError::new(
                    code::INTERNAL,
                    format!(
                        "cannot store an uploaded image in {}: {error}",
                        dir.display()
                    ),
                ));
            }
        }
    }
    Ok(written)
}

/// Removes uploads a refused prompt will not read.
pub fn remove(paths: &[PathBuf]) {
    for path in paths {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\nrest of a png";

    #[test]
    fn an_uploaded_image_becomes_a_private_file_and_a_path_stays() {
        let home = tempfile::tempdir().unwrap();
        let data = base64::engine::general_purpose::STANDARD.encode(PNG);
        let mut params = json!({ "text": "look", "images": [
            "/some/path.png",
            { "name": "shot.png", "media_type": "image/png", "data": data },
        ]});
        let written = store(home.path(), &mut params).unwrap();
        assert_eq!(written.len(), 1);
        assert_eq!(params["images"][0], "/some/path.png");
        let path = params["images"][1].as_str().unwrap();
        assert!(
            path.ends_with(".png") && path.contains("/uploads/"),
            "{path}"
        );
        assert_eq!(std::fs::read(path).unwrap(), PNG);
        let mode = |path: &Path| {
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path).unwrap().permissions())
                & 0o777
        };
        assert_eq!(mode(Path::new(path)), 0o600);
        assert_eq!(mode(&home.path().join(UPLOADS_DIR)), 0o700);
    }

    #[test]
    fn an_uploads_link_is_not_followed_and_a_loose_mode_is_tightened() {
        let home = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let data = base64::engine::general_purpose::STANDARD.encode(PNG);
        let image = json!({ "images": [{ "media_type": "image/png", "data": data }] });
        std::os::unix::fs::symlink(elsewhere.path(), home.path().join(UPLOADS_DIR)).unwrap();
        let error = store(home.path(), &mut image.clone()).unwrap_err();
        assert!(error.message.contains("symbolic link"), "{}", error.message);
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        std::fs::remove_file(home.path().join(UPLOADS_DIR)).unwrap();
        std::fs::create_dir(home.path().join(UPLOADS_DIR)).unwrap();
        let loose = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(home.path().join(UPLOADS_DIR), loose).unwrap();
        store(home.path(), &mut image.clone()).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(home.path().join(UPLOADS_DIR))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn what_is_not_an_image_is_refused_before_anything_is_written() {
        let home = tempfile::tempdir().unwrap();
        let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let good = json!({ "media_type": "image/png", "data": encode(PNG) });
        for (bad, why) in [
            (
                json!({ "media_type": "image/png", "data": encode(b"GIF89a") }),
                "not a image/png",
            ),
            (
                json!({ "media_type": "text/html", "data": encode(b"<p>") }),
                "media_type must be",
            ),
            (
                json!({ "media_type": "image/png", "data": "%%%" }),
                "not base64",
            ),
            (json!({ "media_type": "image/png" }), "data is required"),
            (
                json!({ "media_type": 5, "data": "" }),
                "media_type must be a string",
            ),
        ] {
            let mut params = json!({ "images": [good.clone(), bad] });
            let error = store(home.path(), &mut params).unwrap_err();
            assert_eq!(error.code, code::INVALID_PARAMS);
            assert!(
                error.message.starts_with("images[1]: "),
                "{}",
                error.message
            );
            assert!(error.message.contains(why), "{}", error.message);
        }
        assert!(!home.path().join(UPLOADS_DIR).exists());
    }
}
