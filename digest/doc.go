// Package digest will render the end-of-job severity digest appended to a job's output
// file (issue 5). Nothing is implemented here yet.
package digest
