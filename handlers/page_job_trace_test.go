package handlers

import "testing"

func TestTraceLinkFillsTheTemplateWithATraceIDOnly(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	if got := traceLink("http://jaeger:16686/trace/{trace_id}", id); got != "http://jaeger:16686/trace/"+id {
		t.Errorf("link %q", got)
	}
	for _, bad := range []string{"", "not-hex-not-hex-not-hex-not-hex!", "4bf92f35\"><script>", id + "00"} {
		if got := traceLink("http://jaeger:16686/trace/{trace_id}", bad); got != "" {
			t.Errorf("trace id %q linked as %q; want no link", bad, got)
		}
	}
	if got := traceLink("", id); got != "" {
		t.Errorf("no template linked as %q", got)
	}
}
