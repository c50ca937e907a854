package plan

import (
	"modelserve/internal/engine"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestGPUsOf: nvidia-smi's cards, as the engine package reads them,
// grouped by the planner's classes.
func TestGPUsOf(t *testing.T) {
	cases := []struct {
		name string
		out  string
		want []GPU
		err  string
	}{
		{
			name: "two L4s, one busy",
			out:  "NVIDIA L4, 23034, 20000\nNVIDIA L4, 23034, 0\n",
			want: []GPU{{Class: "L4", Count: 2, MemoryBytes: 23034 << 20, BandwidthGBs: 300,
				FreeBytes: []int64{3034 << 20, 23034 << 20}}},
		},
		{
			name: "A100s of both sizes are told apart by their memory",
			out:  "NVIDIA A100-SXM4-80GB, 81920, 1024\nNVIDIA A100-PCIE-40GB, 40960, 0\n",
			want: []GPU{
				{Class: "A100-80GB", Count: 1, MemoryBytes: Bytes(80), BandwidthGBs: 2039, FreeBytes: []int64{Bytes(79)}},
				{Class: "A100-40GB", Count: 1, MemoryBytes: Bytes(40), BandwidthGBs: 1555, FreeBytes: []int64{Bytes(40)}},
			},
		},
		{
			name: "an L40S is not an L4, and an H100 SXM is not a PCIe card",
			out:  "NVIDIA L40S, 46068, 0\nNVIDIA H100 80GB HBM3, 81559, 0\nTesla T4, 15360, [N/A]\n",
			want: []GPU{
				{Class: "L40S", Count: 1, MemoryBytes: 46068 << 20, BandwidthGBs: 864, FreeBytes: []int64{46068 << 20}},
				{Class: "H100-80GB", Count: 1, MemoryBytes: 81559 << 20, BandwidthGBs: 3350, FreeBytes: []int64{81559 << 20}},
				{Class: "T4", Count: 1, MemoryBytes: Bytes(15), BandwidthGBs: 320, FreeBytes: []int64{Bytes(15)}},
			},
		},
		{
			name: "a card the table lacks keeps its measured memory and an estimated bandwidth",
			out:  "Quadro RTX 8000, 49152, 2048\n",
			want: []GPU{{Class: "Quadro-RTX-8000", Count: 1, MemoryBytes: Bytes(48), BandwidthGBs: UnknownCardBandwidthGBs,
				BandwidthEstimated: true, FreeBytes: []int64{Bytes(46)}}},
		},
		{name: "no cards", out: "\n", want: []GPU{}},
		{name: "a line cut short", out: "NVIDIA L4, 23034\n",
			err: `line 1 of nvidia-smi's output is not name, memory.total, memory.used: "NVIDIA L4, 23034"`},
		{name: "no memory size", out: "NVIDIA L4, [N/A], 0\n",
			err: `line 1 of nvidia-smi's output gives no memory size for NVIDIA L4: "NVIDIA L4, [N/A], 0"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cards, err := engine.ParseNvidiaSMI([]byte(tc.out))
			got := GPUsOf(cards)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v; want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("GPUsOf = %+v, %v\nwant %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseNodes(t *testing.T) {
	cases := []struct {
		name string
		text string
		err  string
		want []Node
	}{
		{
			name: "a fleet, with a card of its own",
			text: `[{"name": "gpu1", "cpu_cores": 32, "ram_gb": 256, "cpu_bandwidth_gbs": 150,
				"gpus": [{"class": "h100-80gb", "count": 4}, {"class": "H100-80GB", "count": 4}]},
				{"name": "lab", "cpu_cores": 8, "ram_gb": 64, "free_ram_gb": 40, "gpus": [{"class": "Arc-A770", "count": 1, "memory_gb": 16}]}]`,
			want: []Node{
				{Name: "gpu1", CPUCores: 32, RAMBytes: Bytes(256), FreeRAMBytes: Bytes(256), CPUBandwidthGBs: 150, GPUs: []GPU{{Class: "H100-80GB", Count: 8,
					MemoryBytes: Bytes(80), BandwidthGBs: 3350, FreeBytes: []int64{Bytes(80), Bytes(80), Bytes(80), Bytes(80), Bytes(80), Bytes(80), Bytes(80), Bytes(80)}}}},
				{Name: "lab", CPUCores: 8, RAMBytes: Bytes(64), FreeRAMBytes: Bytes(40), CPUBandwidthGBs: DefaultCPUBandwidthGBs, GPUs: []GPU{{Class: "Arc-A770",
					Count: 1, MemoryBytes: Bytes(16), BandwidthGBs: UnknownCardBandwidthGBs, BandwidthEstimated: true, FreeBytes: []int64{Bytes(16)}}}},
			},
		},
		{name: "not JSON", text: "[\n{\"name\": \"a\",\n cpu_cores: 4}]",
			err: "the nodes file %s is not a JSON list of nodes (line 3): invalid character 'c' looking for beginning of object key string"},
		{name: "an object, not a list", text: `{"name": "a"}`,
			err: "the nodes file %s is not a JSON list of nodes: json: cannot unmarshal object into Go value of type []json.RawMessage"},
		{name: "an empty list", text: `[]`, err: "the nodes file %s lists no nodes: declare at least one"},
		{name: "an unknown field", text: `[{"name": "a", "cpu_cores": 4, "ram_gb": 8, "vram_gb": 24}]`,
			err: `node 1 of the nodes file %s is not a node: json: unknown field "vram_gb"; a node has name, cpu_cores, ram_gb, cpu_bandwidth_gbs, free_ram_gb and gpus [{class, count, memory_gb, bandwidth_gbs}]`},
		{name: "no name", text: `[{"cpu_cores": 4, "ram_gb": 8}]`, err: "node 1 of the nodes file %s: it has no name"},
		{name: "no cores", text: `[{"name": "a", "ram_gb": 8}]`, err: "node 1 of the nodes file %s: a has no cpu_cores: give how many cores it computes on"},
		{name: "no memory", text: `[{"name": "a", "cpu_cores": 4}]`, err: "node 1 of the nodes file %s: a has no ram_gb: give its memory in GB"},
		{name: "more free than it has", text: `[{"name": "a", "cpu_cores": 4, "ram_gb": 8, "free_ram_gb": 9}]`,
			err: "node 1 of the nodes file %s: a has free_ram_gb 9, which is not between 0 and its ram_gb 8"},
		{name: "the same name twice", text: `[{"name": "a", "cpu_cores": 4, "ram_gb": 8}, {"name": "a", "cpu_cores": 4, "ram_gb": 8}]`,
			err: `the nodes file %s names "a" twice: give each node its own name`},
		{name: "no cards", text: `[{"name": "a", "cpu_cores": 4, "ram_gb": 8, "gpus": [{"class": "L4", "count": 0}]}]`,
			err: `node 1 of the nodes file %s: a declares 0 cards of "L4": give a count of 1 or more`},
		{name: "an unknown card without its memory", text: `[{"name": "a", "cpu_cores": 4, "ram_gb": 8, "gpus": [{"class": "B300", "count": 8}]}]`,
			err: `node 1 of the nodes file %s: a declares cards of class "B300", which the planner does not know: use one of ` +
				strings.Join(Classes(), ", ") + `, or give its memory_gb (and bandwidth_gbs)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const path = "nodes.json"
			got, err := ParseNodes(path, []byte(tc.text))
			if tc.err != "" {
				want := strings.Replace(tc.err, "%s", path, 1)
				if err == nil || err.Error() != want {
					t.Fatalf("error:\n%v\nwant:\n%s", err, want)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseNodes = %+v, %v\nwant %+v", got, err, tc.want)
			}
		})
	}
}

func TestLocalNode(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc/meminfo here")
	}
	n, err := LocalNode()
	if err != nil {
		t.Fatal(err)
	}
	if !n.Local || n.CPUCores < 1 || n.RAMBytes <= 0 || n.FreeRAMBytes <= 0 || n.FreeRAMBytes > n.RAMBytes || n.CPUBandwidthGBs != DefaultCPUBandwidthGBs {
		t.Errorf("LocalNode = %+v; want this machine's cores and memory", n)
	}
}

func TestClassTable(t *testing.T) {
	for _, c := range classes {
		if c.MemoryGB <= 0 || c.BandwidthGBs <= 0 {
			t.Errorf("%s has no memory or bandwidth", c.Name)
		}
		if got, ok := LookupClass(strings.ToLower(strings.ReplaceAll(c.Name, "-", " "))); !ok || got.Name != c.Name {
			t.Errorf("LookupClass(%q) = %q, %v", c.Name, got.Name, ok)
		}
	}
	cases := map[string]string{"A100": "an", "H200": "an", "L4": "an", "RTX-4090": "an", "MI300X": "an", "T4": "a", "V100-32GB": "a"}
	for class, want := range cases {
		if c, ok := LookupClass(class); ok && article(c.Name) != want {
			t.Errorf("article(%s) = %q; want %q", c.Name, article(c.Name), want)
		}
	}
}

// TestLookupClassNames is what a nodes file or a node's label may call a
// card: any case, spaces, dashes and underscores aside; and a name that is
// only the start of another class's is not that class.
func TestLookupClassNames(t *testing.T) {
	for _, c := range []struct {
		name, want string
	}{
		{"a100_80gb", "A100-80GB"},
		{"  RTX 4090 ", "RTX-4090"},
		{"rtx-6000-ada", "RTX-6000-Ada"},
		{"L40", "L40"},
		{"L40S", "L40S"},
		{"A100", ""},
		{"L4X", ""},
		{"", ""},
		{"--", ""},
	} {
		got, ok := LookupClass(c.name)
		if got.Name != c.want || ok != (c.want != "") {
			t.Errorf("LookupClass(%q) = %q, %v; want %q", c.name, got.Name, ok, c.want)
		}
	}
}
