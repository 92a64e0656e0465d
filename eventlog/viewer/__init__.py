"""The viewer page `ckptlog serve` serves (package data: index.html, app.js, style.css)."""
