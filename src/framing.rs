//! What corral adds to a prompt before an engine sees it, and takes out of the answer.
//!
//! - A project's instructions (house rules, e.g. how to show images) come first, separated
//!   from the person's text by a blank line.
//! - A session without a title asks, on its first prompt, for a title line: the agent begins
//!   its answer with `<!-- corral-title: … -->`; [`extract_title`] takes that line out of the
//!   visible answer. (An HTML comment renders as nothing in Markdown, so an engine that
//!   ignores the request still shows a clean answer.)

/// The marker of the title line.
pub const TITLE_MARKER: &str = "corral-title:";

/// The request appended to the first prompt of an untitled session.
const TITLE_REQUEST: &str = "Begin your answer with one line `<!-- corral-title: TITLE -->`, \
    where TITLE names this conversation in at most six words.";

/// The text an engine receives for `text`.
pub fn frame(text: &str, instructions: Option<&str>, ask_title: bool) -> String {
    let mut framed = String::new();
    if let Some(rules) = instructions
        .map(str::trim)
        .filter(|rules| !rules.is_empty())
    {
        framed.push_str(rules);
        framed.push_str("\n\n");
    }
    framed.push_str(text);
    if ask_title {
        framed.push_str("\n\n");
        framed.push_str(TITLE_REQUEST);
    }
    framed
}

/// The title of a `command` session: its command's first non-blank line, at most 120
/// characters.
pub fn command_title(command: &str) -> Option<String> {
    let line = command
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())?;
    Some(line.chars().take(120).collect())
}

/// Splits a `<!-- corral-title: … -->` line off the start of an answer: the title (if any,
/// non-empty) and the answer without that line and the blank lines after it.
pub fn extract_title(answer: &str) -> (Option<String>, String) {
    let trimmed = answer.trim_start();
    let Some(rest) = trimmed.strip_prefix("<!--") else {
        return (None, answer.to_string());
    };
    let Some(end) = rest.find("-->") else {
        return (None, answer.to_string());
    };
    let Some(title) = rest[..end].trim().strip_prefix(TITLE_MARKER) else {
        return (None, answer.to_string());
    };
    let title = title.trim();
    let visible = rest[end + 3..].trim_start_matches([' ', '\t']);
    let visible = visible.trim_start_matches(['\r', '\n']).to_string();
    if title.is_empty() {
        return (None, visible);
    }
    (Some(title.chars().take(120).collect()), visible)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_line_is_taken_out_of_the_answer() {
        let (title, answer) =
            extract_title("<!-- corral-title: Elegant git manager -->\n\nHere are the changes.");
        assert_eq!(title.as_deref(), Some("Elegant git manager"));
        assert_eq!(answer, "Here are the changes.");
        let (title, answer) = extract_title("No title here.");
        assert_eq!((title, answer.as_str()), (None, "No title here."));
        let (title, answer) = extract_title("<!-- a comment -->\nBody");
        assert_eq!((title, answer.as_str()), (None, "<!-- a comment -->\nBody"));
    }

    #[test]
    fn a_command_is_titled_by_its_first_line() {
        assert_eq!(
            command_title("\n  make test \necho done").as_deref(),
            Some("make test")
        );
        assert_eq!(command_title(" \n "), None);
    }

    #[test]
    fn framing_adds_instructions_and_the_title_request() {
        let framed = frame("Fix the bug", Some("Show images inline."), true);
        assert!(framed.starts_with("Show images inline.\n\nFix the bug"));
        assert!(framed.contains(TITLE_MARKER));
        assert_eq!(frame("Fix", None, false), "Fix");
    }
}
