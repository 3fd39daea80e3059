// Package shape holds no code: its test keeps every package of persyst's one a newcomer
// can change (docs/development.md, "The shape of the code").
package shape
