package views

// TokensPage is the API tokens page: those that exist, a form to make
// one, and the one just made, shown this once.
type TokensPage struct {
	Layout Layout
	Tokens []TokenRow
	Form   TokenForm
	// New is the token just made, shown once; "" otherwise. URL is the
	// server's address, as MODELSERVE_URL beside it.
	New, NewName, URL string
	// Notice says what was just done ("app was revoked.").
	Notice string
	// Command is the command line that does what the form does, in the
	// server's data directory.
	Command string
}

// TokenRow is one token as the list shows it: never the token itself,
// which only its hash is kept of. Created and LastUsed are in UTC, as
// every time the console shows.
type TokenRow struct {
	Name, Scope, Models, Created, LastUsed string
}

// TokenForm is the form that makes a token, as filled in, with the
// sentence of what was wrong with it.
type TokenForm struct {
	Name, Scope, Models string
	Error               string
}
