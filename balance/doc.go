// Package balance will hold PerSyst's job balancing (Algorithms 1–3: load and tree
// distance), the agent tree model and a simulator (issue 6). Nothing is implemented here yet.
package balance
