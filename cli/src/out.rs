//! The command's own output on stdout (`status`, `fence`, `dev`). A closed pipe
//! (`redquorum status | head -1`) is no reason to panic, which `println!` does: write errors
//! are ignored, as for the events (`events::print`).

/// Writes one line on stdout, ignoring write errors.
pub(crate) fn line(text: std::fmt::Arguments<'_>) {
    crate::events::write_line(&mut std::io::stdout().lock(), text.to_string());
}

/// `println!` for stdout that cannot panic (see the module).
macro_rules! say {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

pub(crate) use say;
