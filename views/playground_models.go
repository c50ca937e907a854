package views

// CallIt is a served model's "call it" panel: the commands that call it
// through modelserve's gateway, ready to paste, with the API token left as
// a placeholder the reader sets.
type CallIt struct {
	Model string
	// BaseURL is the gateway's address as the console sees it
	// ("https://models.example.com/v1").
	BaseURL string
	// Token is the placeholder for the API token ("$MODELSERVE_TOKEN"),
	// and TokenCommand makes one.
	Token, TokenCommand string
	// Curl, Python and JavaScript are the commands, whole.
	Curl, Python, JavaScript string
}

// PlaygroundPage is a served model's playground: a chat, or for an
// embedding model a text to embed.
type PlaygroundPage struct {
	Layout Layout
	Model  string
	// Embeddings is whether the model embeds rather than chats.
	Embeddings  bool
	Description string
	State       PlaygroundState
	Turns       []Turn
	Form        PlaygroundForm
	// Status is the last reply's summary, said to screen readers when it
	// changes.
	Status    string
	Embedding *Embedding
	CallIt    CallIt
}

// PlaygroundState is how the model fares, under the playground's heading:
// swapped when a reply ends, so it does not still say "not loaded" beside
// the reply the model just gave.
type PlaygroundState struct {
	Model      string
	Embeddings bool
	// Running is how the fleet fares with it ("1 of 1 ready", "on
	// demand"), "" without a fleet.
	Running string
	// Unloaded is a model with no replica running nor starting: the first
	// message (or text) loads it, and its reply waits while it starts.
	Unloaded bool
}

// PlaygroundForm is the playground's form, with what was typed and what
// is wrong with it.
type PlaygroundForm struct {
	// Action is where it posts.
	Action                 string
	CSRF                   string
	Embeddings             bool
	Message, System        string
	MaxTokens, Temperature string
	// MaxTokensLimit is the largest max tokens: the model's longest answer.
	MaxTokensLimit string
	// The errors of each field, and of the whole ("the model is parked:
	// ...").
	MessageError, MaxTokensError, TemperatureError, Error string
}

// Turn is one message of a playground's conversation.
type Turn struct {
	// Role is "user" or "assistant".
	Role string
	// Reply is the assistant's; a user's message is its Text.
	Text  string
	Reply Reply
}

// Reply is the model's answer as far as it has come: the part of the page
// each event of the reply's stream swaps, the last one included.
type Reply struct {
	Text string
	// Waiting is true before the first token; Loading, then, is the
	// model's name while the reply waits for it to load (a cold start),
	// and Room what it waits for while replicas of other models hold the
	// room it needs ("on node local: waiting for gamma-1 to finish the
	// requests it answers").
	Waiting       bool
	Loading, Room string
	// Done is true once the answer has ended, well or not.
	Done bool
	// Tokens is "24 tokens in 0.3 s", the time from the first token to
	// the last; TokensPerSecond "77.4" over that time, which leaves out
	// the wait for room, the start and the prompt ("" for a reply of one
	// token); FirstToken how long the first token took, all of that wait
	// included ("9.1 s"). All "" until done.
	Tokens, TokensPerSecond, FirstToken string
	// Error is why the answer stopped short.
	Error string
}

// PlaygroundSent is what the page gets when a message is sent: the message
// and the reply to come, whose stream it follows.
type PlaygroundSent struct {
	User   Turn
	Stream string
	// Loading is the model's name when it is not loaded as the message
	// goes: the reply waits for it to load; Room what it waits for when
	// other models hold the room it needs (Reply.Room).
	Loading, Room string
	// Form is the form again, emptied of the message and keeping its
	// parameters.
	Form PlaygroundForm
}

// Embedding is an embedding model's answer: the vector's length and its
// first values.
type Embedding struct {
	Text       string
	Dimensions int
	First      []string
	Took       string
	Error      string
}
