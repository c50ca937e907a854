package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"modelserve/internal/trace"
)

// newLogger is serve's log: --log-format text (key=value, for a person at a
// terminal) or json (one object a line, for a collector), from
// --log-level on. Every request is a line at info (internal/accesslog).
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	switch strings.ToLower(strings.TrimSpace(level)) {
	case "debug":
		lv = slog.LevelDebug
	case "", "info":
		lv = slog.LevelInfo
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, usageError{fmt.Errorf("--log-level is debug, info, warn or error, not %q", level)}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", "text":
		return slog.New(trace.LogHandler(slog.NewTextHandler(w, opts))), nil
	case "json":
		return slog.New(trace.LogHandler(slog.NewJSONHandler(w, opts))), nil
	}
	return nil, usageError{fmt.Errorf("--log-format is text or json, not %q", format)}
}
