"""Reading answers: what a candidate's reply says, in the form the votes compare.

answers.py       a reply's final answer (`extract_answer`, `read_answer`), abstentions, and `equivalent`:
                 the grading shared by the votes, the pools and training
answer_types.py  the answer types (number, choice, yes/no, label, name, JSON field, math, text): declared by
                 the caller or inferred from the set, each with its own reading and comparison
answer_text.py, answer_prose.py, answer_json.py
                 the reading of plain text, of prose statements ("the answer is …") and of JSON replies
arithmetic.py    equations in a candidate's work whose two sides differ (a slip)
kinds.py         what a candidate's work looks like (bare answer, slipped, checked): the vote classes
                 `WeightedVote` weighs
"""
