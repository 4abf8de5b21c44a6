//! The documentation's examples run. Every statement of every ```sql block and every
//! `lockstep sql`, `lockstep diagnose`, `lockstep import` and `lockstep check` command of every ```sh/```bash
//! block in `README.md`, `ARCHITECTURE.md` and `docs/*.md` runs through the built binary,
//! against the store a user gets from `lockstep demo` (run here in a temporary directory, as
//! `lockstep-demo/` under the commands' working directory, so the README's relative paths
//! work as written). Every metric name an example compares `metric` with (`=`, `IN`, `LIKE`)
//! must be a series of that store or a family of its catalog.
//!
//! Each statement must succeed and return at least one row, so an example with a wrong metric
//! name or a time range outside the demo's data (2026-03-02 09:00–09:10 UTC) fails too.
//! Fence info words after `sql`: `no-run` skips the block (it cannot run against the demo's
//! store; the prose says why), `empty` lets its statements return no rows; after `sh`, `no-run`
//! skips a block that needs something the test does not have (an exporter to scrape). Any other word is
//! an error, so a typo cannot silently skip a block.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the demo's simulation with fewer nodes than its default (for speed), but over its
/// default 10 minutes, so the examples' time windows match.
const DEMO_ARGS: [&str; 4] = ["--nodes", "4", "--minutes", "10"];

/// A runnable example and where it is.
#[derive(Debug)]
struct Example {
    /// `file:line` of its first line.
    at: String,
    /// What it runs.
    kind: Kind,
    /// Whether it may return no rows (fence info `empty`).
    empty_ok: bool,
}

#[derive(Debug)]
enum Kind {
    /// One statement of a ```sql block.
    Sql(String),
    /// A `lockstep ...` command of a shell block: the arguments after `lockstep`.
    Shell(Vec<String>),
}

/// The Markdown files whose examples are checked, relative to the repository root.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The examples of one Markdown file, and the shell commands it shows that are not run
/// (`file:line: command`).
fn extract(file: &str, text: &str) -> (Vec<Example>, Vec<String>) {
    let (mut examples, mut skipped) = (Vec::new(), Vec::new());
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let mut words = info.split_whitespace();
        let lang = words.next().unwrap_or("");
        let flags: Vec<&str> = words.collect();
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].trim_start().starts_with("```") {
            end += 1;
        }
        let body: Vec<(usize, &str)> = (start..end).map(|k| (k + 1, lines[k])).collect();
        i = end + 1;
        match lang {
            "sql" => {
                for f in &flags {
                    assert!(
                        matches!(*f, "no-run" | "empty"),
                        "{file}:{start}: unknown fence info word {f:?} (no-run, empty)"
                    );
                }
                if flags.contains(&"no-run") {
                    continue;
                }
                for (line, sql) in split_statements(&body) {
                    examples.push(Example {
                        at: format!("{file}:{line}"),
                        kind: Kind::Sql(sql),
                        empty_ok: flags.contains(&"empty"),
                    });
                }
            }
            "sh" | "bash" | "shell" | "console" => {
                for f in &flags {
                    assert!(*f == "no-run", "{file}:{start}: unknown fence info word {f:?} (no-run)");
                }
                if flags.contains(&"no-run") {
                    skipped.push(format!("{file}:{start}: a no-run shell block"));
                    continue;
                }
                let block: String = body.iter().map(|(_, l)| format!("{l}\n")).collect();
                for (line, words) in shell_commands(&block, start + 1) {
                    let runs = words.first().is_some_and(|w| w == "lockstep")
                        && matches!(words.get(1).map(String::as_str), Some("sql" | "diagnose" | "import" | "check"));
                    if runs {
                        let kind = Kind::Shell(words[1..].to_vec());
                        examples.push(Example { at: format!("{file}:{line}"), kind, empty_ok: false });
                    } else {
                        skipped.push(format!("{file}:{line}: {}", words.join(" ")));
                    }
                }
            }
            _ => {}
        }
    }
    (examples, skipped)
}

/// Splits a SQL block into statements at lines whose code ends with `;`; comment lines before
/// a statement are dropped. Returns `(line of the statement's first code line, statement)`.
fn split_statements(body: &[(usize, &str)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let (mut cur, mut first) = (String::new(), 0);
    for &(line, text) in body {
        let code = text.split("--").next().unwrap();
        if cur.is_empty() && code.trim().is_empty() {
            continue;
        }
        if cur.is_empty() {
            first = line;
        }
        cur.push_str(text);
        cur.push('\n');
        if code.trim_end().ends_with(';') {
            out.push((first, std::mem::take(&mut cur)));
        }
    }
    if !cur.trim().is_empty() {
        out.push((first, cur));
    }
    out
}

/// Splits a shell block into commands of words, as `sh` would: single and double quotes
/// (spanning lines), backslash escapes and line continuations, `#` comments. Returns
/// `(line of the command's first word, words)`.
fn shell_commands(block: &str, first_line: usize) -> Vec<(usize, Vec<String>)> {
    let mut cmds = Vec::new();
    let (mut words, mut cur, mut in_word) = (Vec::<String>::new(), String::new(), false);
    let (mut line, mut start) = (first_line, first_line);
    let mut chars = block.chars().peekable();
    while let Some(c) = chars.next() {
        if words.is_empty() && !in_word && !c.is_whitespace() && c != '#' {
            start = line;
        }
        match c {
            '\n' | ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                if c == '\n' {
                    if !words.is_empty() {
                        cmds.push((start, std::mem::take(&mut words)));
                    }
                    line += 1;
                }
            }
            '#' if !in_word => {
                while chars.peek().is_some_and(|&n| n != '\n') {
                    chars.next();
                }
            }
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    line += usize::from(c == '\n');
                    cur.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' if chars.peek().is_some_and(|n| matches!(n, '"' | '\\' | '$' | '`')) => {
                            cur.push(chars.next().unwrap())
                        }
                        _ => {
                            line += usize::from(c == '\n');
                            cur.push(c);
                        }
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => line += 1,
                Some(n) => {
                    in_word = true;
                    cur.push(n);
                }
                None => {}
            },
            _ => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    if !words.is_empty() {
        cmds.push((start, words));
    }
    cmds
}

/// The string literals a statement compares the `metric` column with: `(name, is a LIKE
/// pattern)`.
fn metric_names(sql: &str) -> Vec<(String, bool)> {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = sql[from..].find("metric") {
        let at = from + k;
        from = at + "metric".len();
        if (at > 0 && ident(b[at - 1])) || b.get(from).is_some_and(|&c| ident(c)) {
            continue;
        }
        let rest = sql[from..].trim_start();
        let upper = rest.to_ascii_uppercase();
        let word = |w: &str| upper.starts_with(w) && !upper.as_bytes().get(w.len()).is_some_and(|&c| ident(c));
        let quoted = |s: &str| s.trim_start().strip_prefix('\'').and_then(|l| l.split('\'').next()).map(str::to_string);
        if let Some(r) = ["=", "<>", "!="].iter().find_map(|op| rest.strip_prefix(op)) {
            out.extend(quoted(r).map(|n| (n, false)));
        } else if word("IN") || word("NOT IN") {
            let list = rest[rest.find('(').unwrap() + 1..].split(')').next().unwrap();
            out.extend(list.split(',').filter_map(quoted).map(|n| (n, false)));
        } else if let Some(w) = ["LIKE", "ILIKE", "NOT LIKE", "NOT ILIKE"].iter().find(|w| word(w)) {
            out.extend(quoted(&rest[w.len()..]).map(|n| (n, true)));
        }
    }
    out
}

/// SQL `LIKE` matching: `%` any sequence, `_` one character.
fn like(pattern: &[char], s: &[char]) -> bool {
    match pattern.split_first() {
        None => s.is_empty(),
        Some(('%', rest)) => (0..=s.len()).any(|k| like(rest, &s[k..])),
        Some((p, rest)) => s.split_first().is_some_and(|(c, tail)| (*p == '_' || p == c) && like(rest, tail)),
    }
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockstep")).args(args).current_dir(dir).output().expect("run lockstep")
}

/// Rows of a `--format csv` or `json` output, or of a table (lines that start with `| `,
/// less the header).
fn rows(stdout: &str) -> usize {
    if stdout.starts_with('+') {
        stdout.lines().filter(|l| l.starts_with("| ")).count().saturating_sub(1)
    } else {
        stdout.lines().filter(|l| !l.trim().is_empty()).count()
    }
}

/// The SQL of an example: a statement, or the query argument of a `lockstep sql` command.
fn example_sql(e: &Example) -> Option<&str> {
    match &e.kind {
        Kind::Sql(sql) => Some(sql),
        Kind::Shell(words) => (words[0] == "sql").then(|| words.last().unwrap().as_str()),
    }
}

/// Runs one example in `cwd` against the store `db`; the failure, if any.
fn check(cwd: &Path, db: &str, e: &Example) -> Option<String> {
    let args: Vec<&str> = match &e.kind {
        Kind::Sql(sql) => vec!["sql", "--data-dir", db, "--format", "json", sql],
        Kind::Shell(words) => words.iter().map(String::as_str).collect(),
    };
    let out = run_in(cwd, &args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        Some(format!("{}: failed: {}", e.at, stderr.trim()))
    } else if args[0] == "diagnose" && (stdout.contains("NaN") || stderr.contains("warning")) {
        Some(format!("{}: NaN or a warning:\n{stdout}{stderr}", e.at))
    } else if args[0] == "sql" && !e.empty_ok && rows(&stdout) == 0 {
        Some(format!("{}: returned no rows (fence the block `sql empty` if that is intended)", e.at))
    } else {
        None
    }
}

/// The extractor finds what the documentation's blocks hold.
#[test]
fn extractor_reads_sql_and_shell_blocks() {
    let md = "text\n```sql\n-- a comment\nSELECT 1;\nSELECT 'a;b' AS x\nFROM t;\n\n-- result\n```\n\
        ```sql no-run\nCREATE TABLE t AS SELECT 1;\n```\n\
        ```sh\n# comment\nlockstep sql --data-dir ./db \\\n  \"SELECT host FROM samples\n   WHERE metric = 'a'\" # trailing\n\
        lockstep serve --data-dir ./db\ncargo run -- demo\n```\n";
    let (examples, skipped) = extract("x.md", md);
    let got: Vec<(String, String)> = examples
        .iter()
        .map(|e| match &e.kind {
            Kind::Sql(s) => (e.at.clone(), s.trim().to_string()),
            Kind::Shell(w) => (e.at.clone(), w.join("|")),
        })
        .collect();
    assert_eq!(
        got,
        [
            ("x.md:4".to_string(), "SELECT 1;".to_string()),
            ("x.md:5".to_string(), "SELECT 'a;b' AS x\nFROM t;".to_string()),
            ("x.md:15".to_string(), "sql|--data-dir|./db|SELECT host FROM samples\n   WHERE metric = 'a'".to_string()),
        ]
    );
    assert_eq!(skipped, ["x.md:18: lockstep serve --data-dir ./db", "x.md:19: cargo run -- demo"]);
    let names = metric_names(
        "SELECT 1 FROM samples s WHERE s.metric = 'a' OR metric IN ('b', 'c') OR metric LIKE 'd%' \
         OR avg(CASE WHEN metric='e' THEN value END) > 0 AND metric_catalog = 'no' AND metric NOT IN ('f')",
    );
    let names: Vec<String> = names.into_iter().map(|(n, p)| if p { format!("~{n}") } else { n }).collect();
    assert_eq!(names, ["a", "b", "c", "~d%", "e", "f"]);
    let c = |s: &str| s.chars().collect::<Vec<_>>();
    assert!(like(&c("infiniband%error%"), &c("infiniband_switch_port_symbol_error_total")));
    assert!(!like(&c("nccl_"), &c("nccl_x_y")));
}

/// Every example of the documentation runs against the demo's store and returns rows; every
/// metric name it uses exists.
#[test]
fn documented_examples_run_against_the_demo_store() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut examples = Vec::new();
    let mut skipped = Vec::new();
    for file in doc_files(root) {
        let text = std::fs::read_to_string(root.join(&file)).unwrap();
        let (e, s) = extract(&file.display().to_string(), &text);
        examples.extend(e);
        skipped.extend(s);
    }
    let sql_count = examples.iter().filter(|e| matches!(e.kind, Kind::Sql(_))).count();
    assert!(sql_count >= 20 && examples.len() > sql_count, "extracted too few examples: {examples:#?}");

    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let mut args = vec!["demo", "--dir", "lockstep-demo"];
    args.extend(DEMO_ARGS);
    let out = run_in(cwd, &args);
    assert!(out.status.success(), "lockstep demo: {}", String::from_utf8_lossy(&out.stderr));
    let db = "lockstep-demo/db";

    let csv_column = |sql: &str| -> BTreeSet<String> {
        let out = run_in(cwd, &["sql", "--data-dir", db, "--format", "csv", sql]);
        assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().skip(1).map(str::to_string).collect()
    };
    let mut known = csv_column("SELECT DISTINCT metric FROM samples");
    known.extend(csv_column("SELECT family FROM metric_catalog"));
    let known_chars: Vec<Vec<char>> = known.iter().map(|n| n.chars().collect()).collect();

    let mut unknown = BTreeSet::new();
    for e in &examples {
        for (name, pattern) in example_sql(e).map(metric_names).unwrap_or_default() {
            let exists = if pattern {
                let p: Vec<char> = name.chars().collect();
                known_chars.iter().any(|k| like(&p, k))
            } else {
                known.contains(&name)
            };
            if !exists {
                unknown.insert(format!("{}: {name:?}", e.at));
            }
        }
    }
    // The examples only read (the import writes its own store), so two run at a time.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut failures = Vec::new();
                    while let Some(e) = examples.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        failures.extend(check(cwd, db, e));
                    }
                    failures
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    failures.sort();

    // The README's former postmortem windows held no data and printed NaN without a word.
    let out = run_in(
        cwd,
        &[
            "diagnose",
            "--data-dir",
            db,
            "--job",
            "llm-70b",
            "--baseline-from",
            "2026-03-02T09:00:00Z",
            "--baseline-to",
            "2026-03-02T09:03:00Z",
            "--from",
            "2026-03-03T08:00:00Z",
            "--to",
            "2026-03-03T09:00:00Z",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("warning: the after window [2026-03-03T08:00:00"), "{stderr}");
    assert!(!stderr.contains("before window"), "{stderr}");

    assert!(
        failures.is_empty() && unknown.is_empty(),
        "{} of {} documented examples failed:\n{}\nmetric names that are neither a series of the demo's store nor a catalog family:\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n"),
        unknown.into_iter().collect::<Vec<_>>().join("\n")
    );
    eprintln!("ran {} examples ({sql_count} SQL statements); not run: {skipped:?}", examples.len());
}
