package views

// ServeForm is what the serve form holds: the values as typed, so that a
// page re-rendered (a refused submit, another file chosen) keeps them.
type ServeForm struct {
	Repo, Revision string
	// Chosen is the file set the sizing fields were filled for, and
	// Format its format ("gguf" or "safetensors").
	Chosen, Format string
	Projector      string
	// Where is "" (the planner decides), "cpu" or "gpu:CLASS:CARDS:NODES".
	Where string
	// CtxPool is the tokens the engine holds, shared by Slots requests.
	CtxPool, Slots, Replicas string
	Name                     string
	Class, GuardFormat       string
	Embeddings, Tools        bool
	Aliases, Description     string
	Env                      string
}

// ServePage is the serve page.
type ServePage struct {
	Layout Layout
	Form   ServeForm
	Report Report
	// Error is the sentence a refused submit was refused with.
	Error   string
	Choices ServeChoices
	// Search is the model search above the form; SearchOn is false when
	// no registry can be searched, and the box is not shown.
	Search   ServeSearch
	SearchOn bool
}

// ServeChoices are the words the form's fields take, from their owners:
// the guard formats a judge answers in, and the engine settings a profile
// may set.
type ServeChoices struct {
	GuardFormats, EngineSettings []string
}

// ServeSearch is a search for a repository by a word of its name, and
// what it found.
type ServeSearch struct {
	Query string
	// Shown is false until something was searched for.
	Shown bool
	// Error is the sentence the search failed with; Results may still
	// hold what another registry found.
	Error   string
	Results []Found
}

// Found is one repository a search found. Href looks it up on the serve
// page, the same URL with and without JavaScript.
type Found struct {
	ID, Href         string
	Downloads, Likes string
	Gated            string
	Private, Local   bool
}

// Report is what a repository holds and the plan for it: the serve page's
// swappable part below the repository field.
type Report struct {
	// Shown is false until a repository has been asked for.
	Shown bool
	// Picked is a report answering Choose: focus goes to the chosen row's
	// button, where the operator was, rather than to the page's start.
	Picked bool
	// Error is the sentence the lookup failed with, shown in place of the
	// table.
	Error       string
	Repo        string
	Revision    string
	Commit      string
	ShortCommit string
	// Gated is "" or how access is granted ("manual approval"); GatedNote
	// is the sentence when the registry token cannot download the files.
	Gated     string
	GatedNote string
	// Planned is whether the figures of a plan are there; without a
	// planner the table shows the files alone.
	Planned    bool
	Reason     string
	Notes      []string
	Sets       []Set
	Projectors []Projector
	// Where are the places the chosen set can run, for the form's select.
	Where  []Choice
	Memory Memory
	// SuggestedName is what the model is called when the name is left
	// empty.
	SuggestedName string
	// PerSlot says what each request can use: "each of 4 slots holds
	// 4096 tokens".
	PerSlot string
	// LongestPool in LongestSlots slots is the longest context that fits
	// where the chosen set runs best, offered beside the default the form
	// is filled with; 0 when nothing says.
	LongestPool, LongestSlots int
	// Blocked says why Serve is disabled ("This file fits no node of the
	// pool: …"), "" when the form can serve what it shows.
	Blocked string
}

// Set is one file set of the repository and where it can run.
type Set struct {
	Name, Quant, Format, Size, Shards string
	Architecture                      string
	Recommended, Chosen, Planned      bool
	Note                              string
	Fits                              []Fit
	// TokensPerSecond is the best option's estimate, "—" when none, and
	// Measured what a model served from this file measured ("41 tokens/s
	// measured"), "" when none has run.
	TokensPerSecond, Measured string
}

// Fit is whether a set fits one option of the plan.
type Fit struct {
	Label string // "CPU", "1×L4"
	State State  // "fits now", "fits when free", "does not fit"
	Why   string
}

// Projector is a vision projector file.
type Projector struct{ Path, Size string }

// Choice is an option of a select.
type Choice struct {
	Value, Label string
	Selected     bool
}

// Memory is the chosen set's memory bars, one per option, for the context
// in the form.
type Memory struct {
	Context string
	Bars    []Bar
	// Note says why there are no bars.
	Note string
}
