package catalog_test

import (
	"errors"
	"strings"
	"testing"

	"modelserve/catalog"
)

// validModel is the smallest model the catalog takes.
func validModel(name string) catalog.Model {
	return catalog.Model{
		Name:          name,
		ContextLength: 4096,
		Profiles:      []catalog.Profile{{Name: "cpu", Engine: "llamacpp"}},
		Scaling:       catalog.Scaling{Min: 0, Max: 1},
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		change func(*catalog.Model)
	}{
		{"the smallest model", func(*catalog.Model) {}},
		{"a name of every allowed character", func(m *catalog.Model) { m.Name = "0qwen3.5-4b_q4" }},
		{"a name of 64 characters", func(m *catalog.Model) { m.Name = strings.Repeat("a", 64) }},
		{"each class", func(m *catalog.Model) { m.Class = catalog.ClassOpportunistic }},
		{"a judge", func(m *catalog.Model) {
			m.Role, m.Guard = catalog.RoleGuard, &catalog.GuardModel{Format: catalog.GuardQwen3Guard}
		}},
		{"a guard with no format and no role", func(m *catalog.Model) { m.Guard = &catalog.GuardModel{} }},
		{"an engine setting of each kind of value", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"NCCL_DEBUG": "INFO", "CUDA_MODULE_LOADING": "LAZY",
				"GGML_CUDA_NO_PINNED": "1", "OMP_NUM_THREADS": "4"}
		}},
		{"a fixed number of replicas", func(m *catalog.Model) { m.Scaling = catalog.Scaling{Min: 2, Max: 2} }},
		{"a canary", func(m *catalog.Model) {
			m.Name, m.Canary = catalog.CanaryName("chatty", "3f2a1b09e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3"), &catalog.Canary{Of: "chatty", Share: 0.1}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validModel("m")
			tt.change(&m)
			if err := m.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestValidateRefuses(t *testing.T) {
	tests := []struct {
		name   string
		change func(*catalog.Model)
		// mention is what the sentence must name: the offending value.
		mention string
	}{
		{"no name", func(m *catalog.Model) { m.Name = "" }, "no name"},
		{"an upper-case name", func(m *catalog.Model) { m.Name = "Qwen3" }, `"Qwen3"`},
		{"a name starting with a dash", func(m *catalog.Model) { m.Name = "-qwen" }, `"-qwen"`},
		{"a name with a slash", func(m *catalog.Model) { m.Name = "qwen/qwen3" }, `"qwen/qwen3"`},
		{"a name of 65 characters", func(m *catalog.Model) { m.Name = strings.Repeat("a", 65) }, strings.Repeat("a", 65)},
		{"an alias with a space", func(m *catalog.Model) { m.Aliases = []string{"ok", "my model"} }, `"my model"`},
		{"an empty alias", func(m *catalog.Model) { m.Aliases = []string{""} }, `alias ""`},
		{"an alias that is the model's own name", func(m *catalog.Model) { m.Aliases = []string{"m"} }, `"m"`},
		{"an alias listed twice", func(m *catalog.Model) { m.Aliases = []string{"a", "b", "a"} }, `"a"`},
		{"an unknown class", func(m *catalog.Model) { m.Class = "gold" }, `"gold"`},
		{"an unknown role", func(m *catalog.Model) { m.Role = "judge" }, `"judge"`},
		{"an unknown guard format", func(m *catalog.Model) {
			m.Role, m.Guard = catalog.RoleGuard, &catalog.GuardModel{Format: "llamaguard2"}
		}, `"llamaguard2"`},
		{"a guard format without the role", func(m *catalog.Model) {
			m.Guard = &catalog.GuardModel{Format: catalog.GuardJSON}
		}, `"json"`},
		{"the role guard without a format", func(m *catalog.Model) { m.Role = catalog.RoleGuard }, "no guard format"},
		{"an engine variable outside the allow-list", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"NCCL_DEBUG": "INFO", "LD_PRELOAD": "/tmp/x.so"}
		}, `"LD_PRELOAD"`},
		{"a prefix with nothing after it", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"GGML_": "1"}
		}, `"GGML_"`},
		// Each of these reached a process before settings were named: a
		// library loaded into the engine, a file written anywhere, a shell.
		{"a backend library", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"GGML_BACKEND_PATH": "/srv/mirror/x/evil.so"}
		}, `"GGML_BACKEND_PATH"`},
		{"a log file", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"LLAMA_ARG_LOG_FILE": "/etc/cron.d/x"}
		}, `"LLAMA_ARG_LOG_FILE"`},
		{"the engine's tools", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"LLAMA_ARG_TOOLS": "all"}
		}, `"LLAMA_ARG_TOOLS"`},
		{"the devices, which are the fleet's", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"CUDA_VISIBLE_DEVICES": "0"}
		}, `"CUDA_VISIBLE_DEVICES"`},
		{"a number out of range", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"OMP_NUM_THREADS": "100000"}
		}, `from 1 to 1024`},
		{"a number that is not one", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"OMP_NUM_THREADS": "4; rm -rf /"}
		}, `"4; rm -rf /"`},
		{"a flag that is not 0 or 1", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"GGML_CUDA_NO_PINNED": "yes"}
		}, `0 or 1`},
		{"a word it does not take", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"NCCL_DEBUG": "info"}
		}, `one of VERSION, WARN, INFO, TRACE`},
		{"a long value, quoted short", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"NCCL_DEBUG": strings.Repeat("A", 5000)}
		}, `too long`},
		{"a near miss of OMP_NUM_THREADS", func(m *catalog.Model) {
			m.Profiles[0].Env = map[string]string{"OMP_NUM_THREADS_MAX": "4"}
		}, `"OMP_NUM_THREADS_MAX"`},
		{"no profile", func(m *catalog.Model) { m.Profiles = nil }, "no profile"},
		{"a profile without a name", func(m *catalog.Model) {
			m.Profiles = append(m.Profiles, catalog.Profile{Engine: "vllm"})
		}, "profile 2"},
		{"two profiles of one name", func(m *catalog.Model) {
			m.Profiles = append(m.Profiles, catalog.Profile{Name: "cpu", Engine: "llamacpp"})
		}, `"cpu"`},
		{"no context length", func(m *catalog.Model) { m.ContextLength = 0 }, "is 0"},
		{"a negative context length", func(m *catalog.Model) { m.ContextLength = -1 }, "is -1"},
		{"a negative minimum of replicas", func(m *catalog.Model) { m.Scaling = catalog.Scaling{Min: -1, Max: 1} }, "-1"},
		{"a maximum below the minimum", func(m *catalog.Model) { m.Scaling = catalog.Scaling{Min: 3, Max: 2} }, "to 2 replicas"},
		{"a canary's name on a model", func(m *catalog.Model) { m.Name = "chatty@3f2a1b0" }, `"chatty@3f2a1b0"`},
		{"a canary named after another model", func(m *catalog.Model) {
			m.Name, m.Canary = "other@3f2a1b0", &catalog.Canary{Of: "chatty"}
		}, `"other@3f2a1b0"`},
		{"a canary named without its commit", func(m *catalog.Model) {
			m.Name, m.Canary = "chatty-canary", &catalog.Canary{Of: "chatty"}
		}, `"chatty-canary"`},
		{"a canary taking more than all", func(m *catalog.Model) {
			m.Name, m.Canary = "chatty@3f2a1b0", &catalog.Canary{Of: "chatty", Share: 1.5}
		}, "1.5"},
		{"a canary with an alias", func(m *catalog.Model) {
			m.Name, m.Canary, m.Aliases = "chatty@3f2a1b0", &catalog.Canary{Of: "chatty"}, []string{"beta"}
		}, "has aliases"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validModel("m")
			tt.change(&m)
			err := m.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want a refusal")
			}
			if !errors.Is(err, catalog.ErrInvalid) {
				t.Errorf("Validate() = %v, which does not match ErrInvalid", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.mention) {
				t.Errorf("Validate() = %q, want it to mention %s", msg, tt.mention)
			}
			if msg != strings.ToLower(msg[:1])+msg[1:] || strings.HasSuffix(msg, ".") {
				t.Errorf("Validate() = %q, want a sentence starting lowercase with no final period", msg)
			}
			if len(msg) > 1000 {
				t.Errorf("Validate() is %d bytes long: a sentence quotes a little of the input, not all of it", len(msg))
			}
		})
	}
}

// TestHostBytes: what a replica holds of a node's RAM, which both fleets
// place and request by: a profile's own figure; on cards, one written
// before the plan said is taken to hold 1 GiB and its prompt cache.
func TestHostBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    catalog.Profile
		want int64
	}{
		{"on the CPU", catalog.Profile{RAMBytes: 6 << 30, PromptCacheBytes: 1 << 30}, 6 << 30},
		{"on cards, as the plan writes it", catalog.Profile{GPUClass: "L4", CardBytes: 8 << 30, RAMBytes: 900 << 20, PromptCacheBytes: 512 << 20}, 900 << 20},
		{"on cards, written before", catalog.Profile{GPUClass: "L4", CardBytes: 8 << 30, PromptCacheBytes: 512 << 20}, 1<<30 + 512<<20},
	} {
		if got := tc.p.HostBytes(); got != tc.want {
			t.Errorf("%s: %d bytes of RAM, want %d", tc.name, got, tc.want)
		}
	}
}
