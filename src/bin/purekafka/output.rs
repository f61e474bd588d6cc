//! Shared output for the admin commands: aligned tables for people, one
//! JSON document for scripts, and per-resource failure reporting (print
//! every failure, then exit non-zero with the first one as the reason).

use std::fmt::Display;

use clap::Args;
use purekafka::Error;

/// `--json` for read commands.
#[derive(Args, Debug, Clone, Copy)]
pub struct Format {
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// A table with a header row; columns are padded to their widest cell and
/// separated by two spaces.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells print empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, no trailing spaces.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, w) in widths.iter().enumerate() {
                let cell = r.get(i).map(String::as_str).unwrap_or("");
                line.push_str(cell);
                if i + 1 < cols {
                    line.extend(std::iter::repeat_n(' ', w - cell.chars().count() + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table to stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

/// Prints a JSON document (pretty, so diffs of saved output read well).
pub fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// A comma-separated list.
pub fn list<T: Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Collects per-resource failures while the successes print;
/// [`Failures::finish`] prints the others to stderr and fails with the
/// first, which `main` prints as the one-line reason.
#[derive(Default)]
pub struct Failures {
    errors: Vec<Error>,
}

impl Failures {
    /// Records `r`'s error, if any, and passes its value on.
    pub fn take<T>(&mut self, r: purekafka::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors.push(e);
                None
            }
        }
    }

    /// `Ok` when nothing failed, else the first failure (exit code 1).
    pub fn finish(self) -> purekafka::Result<()> {
        let mut errors = self.errors.into_iter();
        match errors.next() {
            None => Ok(()),
            Some(first) => {
                for e in errors {
                    eprintln!("error: {e}");
                }
                Err(first)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_trim_lines() {
        let mut t = Table::new(&["TOPIC", "PARTITION", "NOTE"]);
        t.row(vec!["orders".into(), "0".into(), String::new()]);
        t.row(vec!["a".into(), "12".into(), "x".into()]);
        assert_eq!(
            t.render(),
            "TOPIC   PARTITION  NOTE\norders  0\na       12         x\n"
        );
    }
}
