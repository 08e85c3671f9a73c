//! The codex form: `exec --json`'s events, a new or resumed thread.

use super::*;

/// codex's token usage of a turn (small fixed numbers).
fn codex_usage() -> J {
    obj! {
        "input_tokens" => 100u64,
        "cached_input_tokens" => 0u64,
        "cache_write_input_tokens" => 0u64,
        "output_tokens" => 10u64,
        "reasoning_output_tokens" => 0u64,
    }
}

pub(crate) fn codex(script: &Script, prompt: &str, resumed: Option<&str>, attempt: u64) -> ! {
    let mut out = Out {
        stdout: std::io::stdout(),
    };
    if let Some(thread) = resumed {
        if attempt <= script.writer_conflict {
            eprintln!(
                "Error: thread/resume: thread/resume failed: thread {thread} already has an active writer (code -32600)"
            );
            exit(script, 1);
        }
        if script.missing_rollout {
            eprintln!(
                "Error: thread/resume: thread/resume failed: no rollout found for thread id {thread} (code -32600)"
            );
            exit(script, 1);
        }
    }
    let thread_id = match resumed {
        Some(thread) => thread.to_string(),
        None => uuid::Uuid::now_v7().to_string(),
    };
    out.line(&obj! {"type" => "thread.started", "thread_id" => thread_id});
    out.line(&obj! {"type" => "turn.started"});
    spawn_background(script);
    sleep_ms(script.delay_ms);

    let failure = if attempt <= script.rate_limit {
        Some(CODEX_RATE_LIMIT.to_string())
    } else {
        script.fail.clone()
    };
    if let Some(message) = failure {
        out.line(&obj! {"type" => "error", "message" => &message});
        out.line(&obj! {"type" => "turn.failed", "error" => obj! {"message" => &message}});
        exit(script, 1);
    }

    let mut items = 0u64;
    let mut next_id = || {
        items += 1;
        format!("item_{}", items - 1)
    };
    if let Some(command) = &script.run {
        let id = next_id();
        out.line(&obj! {"type" => "item.started", "item" => obj! {
            "id" => &id,
            "type" => "command_execution",
            "command" => command,
            "aggregated_output" => "",
            "exit_code" => J::null(),
            "status" => "in_progress",
        }});
        let (output, code) = run_command(command, None, &[]);
        let status = if code == 0 { "completed" } else { "failed" };
        out.line(&obj! {"type" => "item.completed", "item" => obj! {
            "id" => &id,
            "type" => "command_execution",
            "command" => command,
            "aggregated_output" => output,
            "exit_code" => code,
            "status" => status,
        }});
    }
    for step in 1..=script.deltas {
        out.line(&obj! {"type" => "item.completed", "item" => obj! {
            "id" => next_id(),
            "type" => "reasoning",
            "text" => format!("step {step}"),
        }});
        sleep_ms(script.interval_ms);
    }
    if script.garbage {
        out.garbage();
    }
    if script.long_line > 0 {
        out.long_line(script.long_line);
    }
    if script.hang {
        sleep_forever();
    }
    let answer = obj! {"type" => "item.completed", "item" => obj! {
        "id" => next_id(),
        "type" => "agent_message",
        "text" => answer_text(script, prompt),
    }};
    if script.crash {
        out.crash(&answer);
    }
    out.line(&answer);
    out.last_line(
        &obj! {"type" => "turn.completed", "usage" => codex_usage()},
        script.partial,
    );
    exit(script, 0)
}
